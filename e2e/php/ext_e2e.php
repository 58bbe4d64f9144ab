<?php
// The php-amqp extension (Debian's php-amqp 1.11, on librabbitmq-c) against the broker under test.
//
// One scenario per run: php ext_e2e.php <scenario> <amqp-uri> <prefix>; one JSON object on stdout as the
// other client programs (e2e/client_programs.py). Every name it declares starts with <prefix> and is
// deleted at the end.
//   pubsub         publisher confirms (confirmSelect, setConfirmCallback, waitForConfirm), typed headers,
//                  a manual-ack consumer with prefetch 10
//   ttl-dlx        queue TTL and per-message expiration dead-lettered; x-death as the extension decodes it
//   rpc            request/reply over direct reply-to (amq.rabbitmq.reply-to), server and client in one process
//   channel-error  a passive declare of a missing queue: AMQPQueueException with the 404; the connection
//                  and a new channel carry on
// Any scenario runs over TLS when the URI is amqps:// (common.php's tls_settings).
require_once __DIR__ . '/common.php';

function connect(string $url): AMQPConnection
{
    [$host, $port, $user, $password, $vhost] = url_parts($url);
    $settings = ['host' => $host, 'port' => $port, 'login' => $user, 'password' => $password,
        'vhost' => $vhost, 'read_timeout' => 5, 'write_timeout' => 5, 'connect_timeout' => 5];
    $tls = tls_settings($url);
    if ($tls !== null) {  // librabbitmq checks the certificate and the host name when 'verify' is on
        $settings += ['cacert' => $tls['ca'], 'verify' => true];
        if ($tls['cert'] !== null) {
            $settings += ['cert' => $tls['cert'], 'key' => $tls['key']];
        }
        if ($tls['external']) {
            $settings['sasl_method'] = AMQP_SASL_METHOD_EXTERNAL;
        }
    }
    $conn = new AMQPConnection($settings);
    $conn->connect();
    return $conn;
}

function queue(AMQPChannel $ch, string $name, int $flags = 0, array $args = []): AMQPQueue
{
    $q = new AMQPQueue($ch);
    $q->setName($name);
    $q->setFlags($flags);
    if ($args) {
        $q->setArguments($args);
    }
    $q->declareQueue();
    return $q;
}

function pubsub(string $url, string $prefix): void
{
    global $DATA;
    $n = 200;
    $conn = connect($url);
    $ch = new AMQPChannel($conn);
    $q = queue($ch, "$prefix.q", AMQP_DURABLE);
    $ch->confirmSelect();
    $acked = 0;
    $nacked = 0;
    $ch->setConfirmCallback(
        function (int $tag, bool $multiple) use (&$acked, $n) {
            $acked = $multiple ? $tag : $acked + 1;
            return $acked < $n;  // false: stop waiting
        },
        function (int $tag, bool $multiple, bool $requeue) use (&$nacked) {
            $nacked++;
            return false;
        }
    );
    $x = new AMQPExchange($ch);  // the default exchange
    $headers = ['int' => 42, 'long' => 1 << 40, 'string' => 'otter', 'bool' => true, 'float' => 1.5,
        'list' => ['a', 1], 'table' => ['nested' => 'yes']];
    for ($i = 0; $i < $n; $i++) {
        $x->publish("m$i", "$prefix.q", AMQP_NOPARAM, ['delivery_mode' => 2, 'content_type' => 'text/plain',
            'message_id' => "m$i", 'headers' => $headers]);
    }
    $ch->waitForConfirm(5);
    $DATA['confirmed'] = $acked;
    $DATA['nacked'] = $nacked;
    check($acked === $n, "confirmed $acked of $n");

    $cch = new AMQPChannel($conn);
    $cch->setPrefetchCount(10);
    $cq = new AMQPQueue($cch);
    $cq->setName("$prefix.q");
    $bodies = [];
    try {
        $cq->consume(function (AMQPEnvelope $m, AMQPQueue $queue) use (&$bodies, &$DATA, $n) {
            if (!$bodies) {
                $DATA['first_message_id'] = $m->getMessageId();
                $DATA['first_delivery_mode'] = $m->getDeliveryMode();
                $DATA['headers'] = typed($m->getHeaders())['value'];
            }
            $bodies[] = $m->getBody();
            $queue->ack($m->getDeliveryTag());
            return count($bodies) < $n;
        });
    } catch (AMQPQueueException $e) {  // read timeout: fewer messages than expected
    }
    $expected = [];
    for ($i = 0; $i < $n; $i++) {
        $expected[] = "m$i";
    }
    $DATA['consumed'] = count($bodies);
    $DATA['in_order'] = $bodies === $expected;
    check(count($bodies) === $n, 'consumed ' . count($bodies) . " of $n");
    $q->delete();
    $conn->disconnect();
}

function ttl_dlx(string $url, string $prefix): void
{
    global $DATA;
    $conn = connect($url);
    $ch = new AMQPChannel($conn);
    $dlq = queue($ch, "$prefix.dlq");
    $dl = ['x-dead-letter-exchange' => '', 'x-dead-letter-routing-key' => "$prefix.dlq"];
    $work = queue($ch, "$prefix.work", 0, $dl + ['x-message-ttl' => 50]);
    $plain = queue($ch, "$prefix.plain", 0, $dl);
    $x = new AMQPExchange($ch);
    $x->publish('queue-ttl', "$prefix.work");
    $x->publish('message-ttl', "$prefix.plain", AMQP_NOPARAM, ['expiration' => '60']);
    $deaths = [];
    $deadline = microtime(true) + 5;
    while (count($deaths) < 2 && microtime(true) < $deadline) {
        $m = $dlq->get(AMQP_AUTOACK);
        if ($m === false || $m === null) {
            usleep(20000);
            continue;
        }
        $h = $m->getHeaders();
        $names = array_keys($h);
        sort($names);
        $deaths[] = ['body' => $m->getBody(), 'header_names' => $names, 'x_death_entries' => count($h['x-death']),
            'x_death' => typed($h['x-death'][0])['value'],
            'expiration_after' => $m->getExpiration() === '' ? null : $m->getExpiration()];
    }
    usort($deaths, fn($a, $b) => strcmp($a['body'], $b['body']));
    $DATA['deaths'] = $deaths;
    check(count($deaths) === 2, 'dead-lettered ' . count($deaths) . ' of 2');
    foreach ([$work, $plain, $dlq] as $q) {
        $q->delete();
    }
    $conn->disconnect();
}

function rpc(string $url, string $prefix): void
{
    // One process, so the server answers between the client's publish and its wait: the client
    // registers its consumer on amq.rabbitmq.reply-to first (consume without a callback only sends
    // basic.consume), the server takes each request with basic.get and replies, then the client waits.
    global $DATA;
    $server = connect($url);
    $client = connect($url);
    $sch = new AMQPChannel($server);
    $requests = queue($sch, "$prefix.rpc", AMQP_AUTODELETE);
    $reply = new AMQPExchange($sch);
    $cch = new AMQPChannel($client);
    $replies = new AMQPQueue($cch);
    $replies->setName('amq.rabbitmq.reply-to');
    $replies->consume(null, AMQP_AUTOACK);
    $ask = new AMQPExchange($cch);
    $answers = [];
    foreach (['otter', 'beaver', 'mink'] as $word) {
        $id = bin2hex(random_bytes(8));
        $ask->publish($word, "$prefix.rpc", AMQP_NOPARAM,
            ['reply_to' => 'amq.rabbitmq.reply-to', 'correlation_id' => $id]);
        $request = false;
        $deadline = microtime(true) + 5;
        while (($request = $requests->get(AMQP_AUTOACK)) === false && microtime(true) < $deadline) {
            usleep(5000);
        }
        if ($request === false) {
            check(false, "request $word never arrived");
            break;
        }
        $DATA['reply_to_seen'] = str_starts_with($request->getReplyTo(), 'amq.rabbitmq.reply-to.');
        $reply->publish(strtoupper($request->getBody()), $request->getReplyTo(), AMQP_NOPARAM,
            ['correlation_id' => $request->getCorrelationId()]);
        $replies->consume(function (AMQPEnvelope $m) use (&$answers, $id, $word) {
            check($m->getCorrelationId() === $id, "the reply to $word has another correlation id");
            $answers[] = $m->getBody();
            return false;  // one reply, back to the loop
        }, AMQP_JUST_CONSUME);
    }
    $DATA['answers'] = $answers;
    $requests->delete();
    $client->disconnect();
    $server->disconnect();
}

function channel_error(string $url, string $prefix): void
{
    global $DATA;
    $conn = connect($url);
    $ch = new AMQPChannel($conn);
    $missing = "$prefix.missing";
    $DATA['missing_queue'] = $missing;
    try {
        queue($ch, $missing, AMQP_PASSIVE);
        check(false, 'passive declare of a missing queue succeeded');
    } catch (AMQPQueueException $e) {
        $DATA['exception'] = get_class($e);
        $DATA['reply_code'] = $e->getCode();
        $DATA['reply_text'] = $e->getMessage();
    }
    $DATA['channel_open'] = $ch->isConnected();
    $DATA['connection_open'] = $conn->isConnected();
    $again = new AMQPChannel($conn);
    $x = new AMQPExchange($again);
    $x->setName('amq.direct');
    $x->setType(AMQP_EX_TYPE_DIRECT);
    $x->setFlags(AMQP_PASSIVE);
    $x->declareExchange();
    $DATA['new_channel_ok'] = $again->isConnected();
    $conn->disconnect();
}

run_scenario(['pubsub' => 'pubsub', 'ttl-dlx' => 'ttl_dlx', 'rpc' => 'rpc', 'channel-error' => 'channel_error'],
    $argv);
