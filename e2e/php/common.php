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

/** host, port, user, password and vhost of an amqp:// or amqps:// URL (RabbitMQ's defaults for what is
 *  missing; no credentials in an amqps:// URL leave them empty, for SASL EXTERNAL). */
function url_parts(string $url): array
{
    $u = parse_url($url);
    $tls = $u['scheme'] === 'amqps';
    $vhost = isset($u['path']) && strlen($u['path']) > 1 ? urldecode(substr($u['path'], 1)) : '/';
    $default = $tls && !isset($u['user']) ? '' : 'guest';
    return [$u['host'], $u['port'] ?? ($tls ? 5671 : 5672), urldecode($u['user'] ?? $default),
        urldecode($u['pass'] ?? $default), $vhost];
}

/** For an amqps:// URL, what the test gave in the environment: the CA to check the server's certificate
 *  against (OTTER_TLS_CA), a client certificate and key (OTTER_TLS_CERT, OTTER_TLS_KEY) and whether to log
 *  in with SASL EXTERNAL (OTTER_TLS_EXTERNAL=1); null for amqp://. */
function tls_settings(string $url): ?array
{
    if (parse_url($url, PHP_URL_SCHEME) !== 'amqps') {
        return null;
    }
    return ['ca' => getenv('OTTER_TLS_CA'), 'cert' => getenv('OTTER_TLS_CERT') ?: null,
        'key' => getenv('OTTER_TLS_KEY') ?: null, 'external' => getenv('OTTER_TLS_EXTERNAL') === '1'];
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
