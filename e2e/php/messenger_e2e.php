<?php
// Symfony Messenger's AMQP transport (Debian's php-symfony-amqp-messenger 5.4, on the php-amqp extension)
// with its retries and failure transport, built in plain PHP without the framework: a MessageBus with
// SendMessageMiddleware + HandleMessageMiddleware, AmqpTransportFactory transports, a Worker whose
// EventDispatcher (php-symfony-event-dispatcher) carries AddErrorDetailsStampListener,
// SendFailedMessageForRetryListener (MultiplierRetryStrategy: 3 retries, 200 ms, x2),
// SendFailedMessageToFailureTransportListener and the StopWorkerOnMessageLimit/TimeLimit listeners.
//
// One scenario per run: php messenger_e2e.php <scenario> <amqp-uri> <work> <failed> <delays>
//   <work>    the transport's direct exchange and its queue (bound with the key "otter", which is also
//             the default publish routing key)
//   <failed>  the failure transport's fanout exchange and its queue
//   <delays>  the delay exchange Messenger publishes delayed and retried messages to
// One JSON object on stdout as the other client programs (e2e/client_programs.py).
//   always-fails  the handler always throws: 1 + 3 attempts, 200/400/800 ms apart, then the failure transport
//   fails-twice   dispatched with a 300 ms DelayStamp; the handler throws twice, then succeeds: 3 attempts
//
// How the bridge delays (Connection::publishWithDelay): it declares a durable queue named
// delay_<exchange>_<routing key>_<delay ms>_<delay|retry> with x-message-ttl = the delay,
// x-expires = delay + 10000 and x-dead-letter-routing-key = the routing key, binds it to the delay exchange
// with its own name and publishes there. A DelayStamp on a new message dead-letters to the transport's
// exchange with the message's routing key ("_delay"); a retry dead-letters through the default exchange
// with the name of the queue the message was received from ("_retry"). The Worker polls with basic.get.
// Each receipt's exchange, routing key and x-death (as the extension decodes them) are reported, so the
// test sees that the broker expired the message and dead-lettered it where the bridge asked.
// The exchanges and queues are left for the test (it reads the delay queues through the management API).
require_once __DIR__ . '/common.php';
require_once '/usr/share/php/Symfony/Component/Messenger/autoload.php';
require_once '/usr/share/php/Symfony/Component/EventDispatcher/autoload.php';
require_once '/usr/share/php/Psr/Container/autoload.php';

use Psr\Container\ContainerInterface;
use Symfony\Component\EventDispatcher\EventDispatcher;
use Symfony\Component\Messenger\Bridge\Amqp\Transport\AmqpReceivedStamp;
use Symfony\Component\Messenger\Bridge\Amqp\Transport\AmqpTransportFactory;
use Symfony\Component\Messenger\Envelope;
use Symfony\Component\Messenger\Event\WorkerMessageReceivedEvent;
use Symfony\Component\Messenger\EventListener\AddErrorDetailsStampListener;
use Symfony\Component\Messenger\EventListener\SendFailedMessageForRetryListener;
use Symfony\Component\Messenger\EventListener\SendFailedMessageToFailureTransportListener;
use Symfony\Component\Messenger\EventListener\StopWorkerOnMessageLimitListener;
use Symfony\Component\Messenger\EventListener\StopWorkerOnTimeLimitListener;
use Symfony\Component\Messenger\Handler\HandlersLocator;
use Symfony\Component\Messenger\MessageBus;
use Symfony\Component\Messenger\Middleware\HandleMessageMiddleware;
use Symfony\Component\Messenger\Middleware\SendMessageMiddleware;
use Symfony\Component\Messenger\Retry\MultiplierRetryStrategy;
use Symfony\Component\Messenger\Stamp\DelayStamp;
use Symfony\Component\Messenger\Stamp\ErrorDetailsStamp;
use Symfony\Component\Messenger\Stamp\RedeliveryStamp;
use Symfony\Component\Messenger\Stamp\SentToFailureTransportStamp;
use Symfony\Component\Messenger\Transport\Sender\SendersLocator;
use Symfony\Component\Messenger\Transport\Serialization\PhpSerializer;
use Symfony\Component\Messenger\Worker;

const TRANSPORT = 'main';        // the transport's name (receiver, sender and retry strategy locators)
const ROUTING_KEY = 'otter';
const MAX_RETRIES = 3;
const FIRST_DELAY_MS = 200;
const MULTIPLIER = 2;
const SLACK_MS = 1500;           // how much later than its delay a retry may come
const WORKER_TIME_LIMIT_S = 10;

/** The message the bus carries. */
final class OtterMessage
{
    public function __construct(public string $name)
    {
    }
}

/** A PSR-11 container over an array: the service locators the framework would build. */
final class Locator implements ContainerInterface
{
    public function __construct(private array $services)
    {
    }

    public function get(string $id)
    {
        if (!isset($this->services[$id])) {
            throw new InvalidArgumentException("no service $id");
        }
        return $this->services[$id];
    }

    public function has(string $id): bool
    {
        return isset($this->services[$id]);
    }
}

/** amqp://user:password@host:port/<vhost>/<exchange> for the bridge's Connection::fromDsn. */
function dsn(string $url, string $exchange, array $query): string
{
    [$host, $port, $user, $password, $vhost] = url_parts($url);
    return sprintf('amqp://%s:%s@%s:%d/%s/%s?%s', rawurlencode($user), rawurlencode($password), $host, $port,
        rawurlencode($vhost), $exchange, http_build_query($query));
}

/** An x-death entry as [field => value] without its time (queue, reason, exchange, count, routing-keys). */
function death_summary(array $entry): array
{
    unset($entry['time']);
    ksort($entry);
    return $entry;
}

/** Dispatch one message, run the worker until it has taken $receipts messages, report what happened. */
function run_bus(string $url, string $work, string $failed, string $delays, int $failures, int $receipts,
                 int $initialDelayMs): void
{
    global $DATA;
    $timeouts = ['read_timeout' => 5, 'write_timeout' => 5, 'connect_timeout' => 5, 'confirm_timeout' => 5];
    $factory = new AmqpTransportFactory();
    $serializer = new PhpSerializer();
    $transport = $factory->createTransport(
        dsn($url, $work, $timeouts + ['exchange' => ['type' => 'direct', 'default_publish_routing_key' => ROUTING_KEY]]),
        ['queues' => [$work => ['binding_keys' => [ROUTING_KEY]]], 'delay' => ['exchange_name' => $delays]],
        $serializer
    );
    $failureTransport = $factory->createTransport(dsn($url, $failed, $timeouts),
        ['queues' => [$failed => []], 'delay' => ['exchange_name' => $delays]], $serializer);

    $attempts = [];   // microtime of each handler call
    $handler = function (OtterMessage $message) use (&$attempts, $failures): void {
        $attempts[] = microtime(true);
        $n = count($attempts);
        if ($n <= $failures) {
            throw new RuntimeException("attempt $n of {$message->name} failed", 40 + $n);
        }
    };
    $senders = new Locator([TRANSPORT => $transport]);
    $bus = new MessageBus([
        new SendMessageMiddleware(new SendersLocator([OtterMessage::class => [TRANSPORT]], $senders)),
        new HandleMessageMiddleware(new HandlersLocator([OtterMessage::class => [$handler]])),
    ]);

    $seen = [];  // each receipt as the worker got it from the queue
    $dispatcher = new EventDispatcher();
    $dispatcher->addListener(WorkerMessageReceivedEvent::class, function (WorkerMessageReceivedEvent $event) use (&$seen) {
        $amqp = $event->getEnvelope()->last(AmqpReceivedStamp::class)->getAmqpEnvelope();
        $headers = $amqp->getHeaders();
        $seen[] = [
            'retry_count' => RedeliveryStamp::getRetryCountFromEnvelope($event->getEnvelope()),
            'exchange' => $amqp->getExchangeName(),
            'routing_key' => $amqp->getRoutingKey(),
            'redelivered' => $amqp->isRedelivery(),
            'x_death' => array_map('death_summary', $headers['x-death'] ?? []),
        ];
    });
    $dispatcher->addSubscriber(new AddErrorDetailsStampListener());
    $dispatcher->addSubscriber(new SendFailedMessageForRetryListener($senders,
        new Locator([TRANSPORT => new MultiplierRetryStrategy(MAX_RETRIES, FIRST_DELAY_MS, MULTIPLIER)]), null, $dispatcher));
    $dispatcher->addSubscriber(new SendFailedMessageToFailureTransportListener(new Locator([TRANSPORT => $failureTransport])));
    $dispatcher->addSubscriber(new StopWorkerOnMessageLimitListener($receipts));
    $dispatcher->addSubscriber(new StopWorkerOnTimeLimitListener(WORKER_TIME_LIMIT_S));

    $start = microtime(true);
    $bus->dispatch(new OtterMessage('otter-1'), $initialDelayMs ? [new DelayStamp($initialDelayMs)] : []);
    $worker = new Worker([TRANSPORT => $transport], $bus, $dispatcher);
    $worker->run(['sleep' => 10000]);  // poll every 10 ms when the queue is empty
    $DATA['worker_ms'] = (int)round(1000 * (microtime(true) - $start));

    $ms = fn(float $t): int => (int)floor(1000 * $t);
    $DATA['attempts'] = count($attempts);
    $DATA['first_attempt_ms'] = $attempts ? $ms($attempts[0] - $start) : null;
    $DATA['gaps_ms'] = [];
    for ($i = 1; $i < count($attempts); $i++) {
        $DATA['gaps_ms'][] = $ms($attempts[$i] - $attempts[$i - 1]);
    }
    $DATA['receipts'] = $seen;
    $DATA['work_queue_left'] = $transport->getMessageCount();

    $DATA['failed'] = [];
    foreach ($failureTransport->get() as $envelope) {
        $DATA['failed'][] = describe_failed($envelope);
        $failureTransport->ack($envelope);
    }

    // what the program checks itself
    $expectedAttempts = min($failures + 1, MAX_RETRIES + 1);
    check(count($attempts) === $expectedAttempts, 'handler attempts: ' . count($attempts) . ", expected $expectedAttempts");
    foreach ($DATA['gaps_ms'] as $i => $gap) {
        $delay = FIRST_DELAY_MS * MULTIPLIER ** $i;
        check($gap >= $delay && $gap < $delay + SLACK_MS, "retry $i came $gap ms after the attempt before (delay $delay ms)");
    }
    if ($initialDelayMs) {
        $first = $DATA['first_attempt_ms'];
        check($first >= $initialDelayMs && $first < $initialDelayMs + SLACK_MS,
            "first attempt $first ms after dispatch (DelayStamp $initialDelayMs ms)");
    }
    $expectedFailed = $failures > MAX_RETRIES ? 1 : 0;
    check(count($DATA['failed']) === $expectedFailed, count($DATA['failed']) . " messages in the failure transport, expected $expectedFailed");
    check($DATA['work_queue_left'] === 0, "{$DATA['work_queue_left']} messages left in $work");
}

/** What the failure transport holds: the envelope's stamps and the AMQP message that carried it. */
function describe_failed(Envelope $envelope): array
{
    $amqp = $envelope->last(AmqpReceivedStamp::class)->getAmqpEnvelope();
    $sentTo = $envelope->last(SentToFailureTransportStamp::class);
    return [
        'message' => $envelope->getMessage()->name,
        'redelivery_stamps' => array_map(fn(RedeliveryStamp $s) => $s->getRetryCount(), $envelope->all(RedeliveryStamp::class)),
        'error_details' => array_map(fn(ErrorDetailsStamp $s) => ['class' => $s->getExceptionClass(),
            'code' => $s->getExceptionCode(), 'message' => $s->getExceptionMessage()], $envelope->all(ErrorDetailsStamp::class)),
        'delay_stamps' => array_map(fn(DelayStamp $s) => $s->getDelay(), $envelope->all(DelayStamp::class)),
        'sent_to_failure_from' => $sentTo?->getOriginalReceiverName(),
        'exchange' => $amqp->getExchangeName(),
        'routing_key' => $amqp->getRoutingKey(),
        'x_death' => array_map('death_summary', $amqp->getHeaders()['x-death'] ?? []),
    ];
}

[$failed, $delays] = array_slice($argv, 4, 2) + ['', ''];
run_scenario([
    'always-fails' => fn(string $url, string $work) => run_bus($url, $work, $failed, $delays, PHP_INT_MAX, MAX_RETRIES + 1, 0),
    'fails-twice' => fn(string $url, string $work) => run_bus($url, $work, $failed, $delays, 2, 3, 300),
], $argv);
