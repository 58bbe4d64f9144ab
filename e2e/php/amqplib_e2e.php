<?php
// php-amqplib (Debian's php-amqplib 3.x, pure PHP) against the broker under test.
//
// One scenario per run: php amqplib_e2e.php <scenario> <amqp-uri> <prefix>. It prints one JSON object
// {"ok", "error", "failures", "data"} on stdout; e2e/test_php_clients.py asserts on "data" and the program
// checks itself ("failures"). Every name it declares starts with <prefix> and is deleted at the end.
//   pubsub         publisher confirms (set_ack_handler, wait_for_pending_acks), typed headers, a manual-ack
//                  consumer with prefetch 10
//   ttl-dlx        queue TTL and per-message expiration dead-lettered; x-death as php-amqplib decodes it
//   rpc            request/reply over direct reply-to (amq.rabbitmq.reply-to)
//   channel-error  a passive declare of a missing queue: AMQPProtocolChannelException with the 404; the
//                  connection and a new channel carry on
// Any scenario runs over TLS (AMQPSSLConnection) when the URI is amqps:// (common.php's tls_settings).
require_once '/usr/share/php/PhpAmqpLib/autoload.php';
require_once __DIR__ . '/common.php';

use PhpAmqpLib\Connection\AMQPSSLConnection;
use PhpAmqpLib\Connection\AMQPStreamConnection;
use PhpAmqpLib\Exception\AMQPProtocolChannelException;
use PhpAmqpLib\Message\AMQPMessage;
use PhpAmqpLib\Wire\AMQPTable;

function connect(string $url): AMQPStreamConnection
{
    [$host, $port, $user, $password, $vhost] = url_parts($url);
    $tls = tls_settings($url);
    if ($tls === null) {
        return new AMQPStreamConnection($host, $port, $user, $password, $vhost);
    }
    $ssl = ['cafile' => $tls['ca'], 'verify_peer' => true, 'verify_peer_name' => true];
    if ($tls['cert'] !== null) {
        $ssl += ['local_cert' => $tls['cert'], 'local_pk' => $tls['key']];
    }
    $options = $tls['external'] ? ['login_method' => 'EXTERNAL', 'login_response' => ''] : [];
    return new AMQPSSLConnection($host, $port, $user, $password, $vhost, $ssl, $options);
}

function pubsub(string $url, string $prefix): void
{
    global $DATA;
    $n = 200;
    $conn = connect($url);
    $ch = $conn->channel();
    $q = "$prefix.q";
    $ch->queue_declare($q, false, true, false, false);
    $ch->confirm_select();
    $acked = 0;
    $nacked = 0;
    $ch->set_ack_handler(function () use (&$acked) { $acked++; });
    $ch->set_nack_handler(function () use (&$nacked) { $nacked++; });
    $headers = new AMQPTable(['int' => 42, 'long' => 1 << 40, 'string' => 'otter', 'bool' => true,
        'float' => 1.5, 'list' => ['a', 1], 'table' => ['nested' => 'yes']]);
    for ($i = 0; $i < $n; $i++) {
        $msg = new AMQPMessage("m$i", ['delivery_mode' => 2, 'content_type' => 'text/plain',
            'message_id' => "m$i", 'application_headers' => $headers]);
        $ch->basic_publish($msg, '', $q);
    }
    $ch->wait_for_pending_acks(5);
    $DATA['confirmed'] = $acked;
    $DATA['nacked'] = $nacked;
    check($acked === $n, "the ack handler ran for $acked of $n");

    $cch = $conn->channel();
    $cch->basic_qos(0, 10, false);
    $bodies = [];
    $cch->basic_consume($q, '', false, false, false, false, function (AMQPMessage $m) use (&$bodies, &$DATA) {
        if (!$bodies) {
            $DATA['first_message_id'] = $m->get('message_id');
            $DATA['first_delivery_mode'] = $m->get('delivery_mode');
            $DATA['headers'] = typed($m->get('application_headers'))['value'];
        }
        $bodies[] = $m->getBody();
        $m->ack();
    });
    $deadline = microtime(true) + 10;
    while (count($bodies) < $n && microtime(true) < $deadline) {
        $cch->wait(null, false, 1);
    }
    $expected = [];
    for ($i = 0; $i < $n; $i++) {
        $expected[] = "m$i";
    }
    $DATA['consumed'] = count($bodies);
    $DATA['in_order'] = $bodies === $expected;
    check(count($bodies) === $n, 'consumed ' . count($bodies) . " of $n");
    $ch->queue_delete($q);
    $conn->close();
}

function ttl_dlx(string $url, string $prefix): void
{
    global $DATA;
    $conn = connect($url);
    $ch = $conn->channel();
    $dlq = "$prefix.dlq";
    $ch->queue_declare($dlq, false, false, false, false);
    $dl = ['x-dead-letter-exchange' => '', 'x-dead-letter-routing-key' => $dlq];
    $ch->queue_declare("$prefix.work", false, false, false, false, false, new AMQPTable($dl + ['x-message-ttl' => 50]));
    $ch->queue_declare("$prefix.plain", false, false, false, false, false, new AMQPTable($dl));
    $ch->basic_publish(new AMQPMessage('queue-ttl'), '', "$prefix.work");
    $ch->basic_publish(new AMQPMessage('message-ttl', ['expiration' => '60']), '', "$prefix.plain");
    $deaths = [];
    $deadline = microtime(true) + 5;
    while (count($deaths) < 2 && microtime(true) < $deadline) {
        $m = $ch->basic_get($dlq, true);
        if ($m === null) {
            usleep(20000);
            continue;
        }
        $h = $m->get('application_headers')->getNativeData();
        $names = array_keys($h);
        sort($names);
        $fields = typed($h['x-death'][0])['value'];
        $deaths[] = ['body' => $m->getBody(), 'header_names' => $names, 'x_death_entries' => count($h['x-death']),
            'x_death' => $fields, 'expiration_after' => $m->has('expiration') ? $m->get('expiration') : null];
    }
    usort($deaths, fn($a, $b) => strcmp($a['body'], $b['body']));
    $DATA['deaths'] = $deaths;
    check(count($deaths) === 2, 'dead-lettered ' . count($deaths) . ' of 2');
    foreach (["$prefix.work", "$prefix.plain", $dlq] as $q) {
        $ch->queue_delete($q);
    }
    $conn->close();
}

function rpc(string $url, string $prefix): void
{
    global $DATA;
    $server = connect($url);
    $client = connect($url);
    $sch = $server->channel();
    $q = "$prefix.rpc";
    $sch->queue_declare($q, false, false, false, true);
    $sch->basic_consume($q, '', false, true, false, false, function (AMQPMessage $m) use ($sch, &$DATA) {
        $DATA['reply_to_seen'] = str_starts_with($m->get('reply_to'), 'amq.rabbitmq.reply-to.');
        $sch->basic_publish(new AMQPMessage(strtoupper($m->getBody()),
            ['correlation_id' => $m->get('correlation_id')]), '', $m->get('reply_to'));
    });
    $cch = $client->channel();
    $reply = null;
    $cch->basic_consume('amq.rabbitmq.reply-to', '', false, true, false, false, function (AMQPMessage $m) use (&$reply) {
        $reply = [$m->get('correlation_id'), $m->getBody()];
    });
    $answers = [];
    foreach (['otter', 'beaver', 'mink'] as $word) {
        $id = bin2hex(random_bytes(8));
        $reply = null;
        $cch->basic_publish(new AMQPMessage($word, ['reply_to' => 'amq.rabbitmq.reply-to', 'correlation_id' => $id]), '', $q);
        $deadline = microtime(true) + 5;
        while ($reply === null && microtime(true) < $deadline) {
            $sch->wait(null, true, 0.05);
            $cch->wait(null, true, 0.05);
        }
        check($reply !== null && $reply[0] === $id, "reply to $word missing or with another correlation id");
        if ($reply !== null) {
            $answers[] = $reply[1];
        }
    }
    $DATA['answers'] = $answers;
    $sch->queue_delete($q);
    $client->close();
    $server->close();
}

function channel_error(string $url, string $prefix): void
{
    global $DATA;
    $conn = connect($url);
    $ch = $conn->channel();
    $missing = "$prefix.missing";
    $DATA['missing_queue'] = $missing;
    try {
        $ch->queue_declare($missing, true);
        check(false, 'passive declare of a missing queue succeeded');
    } catch (AMQPProtocolChannelException $e) {
        $DATA['exception'] = (new ReflectionClass($e))->getShortName();
        $DATA['reply_code'] = $e->getCode();
        $DATA['reply_text'] = $e->getMessage();
        $DATA['class_method'] = $e->amqp_method_sig;
    }
    $DATA['channel_open'] = $ch->is_open();
    $DATA['connection_open'] = $conn->isConnected();
    $again = $conn->channel();
    $again->exchange_declare('amq.direct', 'direct', true);
    $DATA['new_channel_ok'] = $again->is_open();
    $conn->close();
}

run_scenario(['pubsub' => 'pubsub', 'ttl-dlx' => 'ttl_dlx', 'rpc' => 'rpc', 'channel-error' => 'channel_error'], $argv);
