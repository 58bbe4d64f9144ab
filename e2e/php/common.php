<?php
// What the PHP client programs (amqplib_e2e.php, ext_e2e.php) share: the self-checks, the broker URL's
// parts, header values printed with the type the library decoded, and running one scenario with the
// JSON line e2e/client_programs.py reads ({"ok", "error", "failures", "data"}).
$DATA = [];
$FAILURES = [];

function check(bool $ok, string $what): void
{
    global $FAILURES;
    if (!$ok) {
        $FAILURES[] = $what;
    }
}

/** host, port, user, password and vhost of an amqp:// URL (RabbitMQ's defaults for what is missing). */
function url_parts(string $url): array
{
    $u = parse_url($url);
    $vhost = isset($u['path']) && strlen($u['path']) > 1 ? urldecode(substr($u['path'], 1)) : '/';
    return [$u['host'], $u['port'] ?? 5672, urldecode($u['user'] ?? 'guest'), urldecode($u['pass'] ?? 'guest'), $vhost];
}

/** A header value as ["type" => PHP type or class, "value" => ...], the way the library decoded it. */
function typed($v)
{
    if ($v instanceof PhpAmqpLib\Wire\AMQPTable) {
        $v = $v->getNativeData();
    }
    if (is_array($v)) {
        $isList = $v === [] || array_keys($v) === range(0, count($v) - 1);
        $out = [];
        foreach ($v as $k => $x) {
            $out[$k] = typed($x);
        }
        return ['type' => $isList ? 'list' : 'table', 'value' => $isList ? array_values($out) : (object)$out];
    }
    if (is_object($v)) {  // a timestamp: DateTime (php-amqplib), AMQPTimestamp (the extension)
        return ['type' => get_class($v), 'value' => method_exists($v, 'getTimestamp') ? $v->getTimestamp() : (string)$v];
    }
    return ['type' => gettype($v), 'value' => $v];
}

/** Run the scenario argv names (scenario, URL, prefix) from $scenarios and print the JSON line. */
function run_scenario(array $scenarios, array $argv): void
{
    global $DATA, $FAILURES;
    [, $scenario, $url, $prefix] = $argv;
    $error = null;
    try {
        if (!isset($scenarios[$scenario])) {
            throw new InvalidArgumentException("unknown scenario $scenario");
        }
        $scenarios[$scenario]($url, $prefix);
    } catch (Throwable $e) {
        $error = get_class($e) . ': ' . $e->getMessage();
    }
    echo json_encode(['ok' => $error === null && !$FAILURES, 'error' => $error, 'failures' => $FAILURES,
        'data' => (object)$DATA], JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION), "\n";
}
