# Bunny (Debian's ruby-bunny, 2.19) against the broker under test.
#
# One scenario per run: ruby otter_e2e.rb <scenario> <amqp-uri> <prefix>. It prints one JSON object
# {"ok", "error", "failures", "data"} on stdout; e2e/test_ruby_client.py asserts on "data" and the program
# checks itself ("failures"). Every name it declares starts with <prefix> and is deleted at the end.
#   pubsub         publisher confirms (wait_for_confirms), typed headers, a manual-ack consumer, prefetch 10
#   ttl-dlx        queue TTL and per-message expiration dead-lettered; x-death as Bunny decodes it
#   rpc            request/reply over direct reply-to (amq.rabbitmq.reply-to)
#   channel-error  a passive declare of a missing queue: Bunny::NotFound, the channel closed with the 404,
#                  the connection and a new channel carry on
#   recovery       Bunny's automatic recovery: prints "ready", waits for a line on stdin (the test restarts
#                  the broker meanwhile), then checks the recovered consumer gets a message
# Any scenario runs over TLS when the URI is amqps://: the server's certificate checked against
# OTTER_TLS_CA (and the host name), a client certificate from OTTER_TLS_CERT/OTTER_TLS_KEY when set, and
# SASL EXTERNAL when OTTER_TLS_EXTERNAL=1.
require "bunny"
require "json"
require "securerandom"

DATA = {}
FAILURES = []

def check(ok, what)
  FAILURES << what unless ok
end

def tls_options(url)
  return {} unless url.start_with?("amqps://")
  options = {tls: true, verify_peer: true, tls_ca_certificates: [ENV.fetch("OTTER_TLS_CA")]}
  options.update(tls_cert: ENV["OTTER_TLS_CERT"], tls_key: ENV["OTTER_TLS_KEY"]) if ENV["OTTER_TLS_CERT"]
  options[:auth_mechanism] = "EXTERNAL" if ENV["OTTER_TLS_EXTERNAL"] == "1"
  options
end

def connect(url, recover: false)
  conn = Bunny.new(url, automatically_recover: recover, recover_from_connection_close: recover,
                        network_recovery_interval: 0.2, connection_name: "ottermq-e2e-ruby",
                        logger: Logger.new(File::NULL), **tls_options(url))
  conn.start
  conn
end

def wait_until(seconds)
  deadline = Time.now + seconds
  until yield
    return false if Time.now > deadline
    sleep 0.01
  end
  true
end

# The next item of a Queue (what a consumer block pushed), or nil after `seconds`.
def pop_within(queue, seconds)
  item = nil
  wait_until(seconds) { item = (queue.pop(true) rescue nil) }
  item
end

# A header value as {"type" => Ruby class, "value" => ...}, the way Bunny decoded it.
def typed(value)
  case value
  when Hash then { "type" => "Hash", "value" => value.to_h { |k, v| [k, typed(v)] } }
  when Array then { "type" => "Array", "value" => value.map { |v| typed(v) } }
  when Time then { "type" => "Time", "value" => value.to_i }
  else { "type" => value.class.name, "value" => value }
  end
end

def pubsub(url, prefix)
  n = 200
  conn = connect(url)
  ch = conn.create_channel
  q = ch.queue("#{prefix}.q", durable: true)
  ch.confirm_select
  headers = { "int" => 42, "long" => 1 << 40, "string" => "otter", "bool" => true, "float" => 1.5,
              "list" => ["a", 1], "table" => { "nested" => "yes" } }
  n.times do |i|
    ch.default_exchange.publish("m#{i}", routing_key: q.name, persistent: true, content_type: "text/plain",
                                         message_id: "m#{i}", headers: headers)
  end
  DATA["confirmed"] = ch.wait_for_confirms
  DATA["nacked"] = ch.nacked_set.size
  consumer_ch = conn.create_channel
  consumer_ch.prefetch(10)
  bodies = []
  first = nil
  consumer_ch.queue(q.name, passive: true).subscribe(manual_ack: true) do |info, props, body|
    first ||= props
    bodies << body
    consumer_ch.ack(info.delivery_tag)
  end
  check(wait_until(10) { bodies.size == n }, "consumed #{bodies.size} of #{n}")
  DATA["consumed"] = bodies.size
  DATA["in_order"] = bodies == (0...n).map { |i| "m#{i}" }
  DATA["first_message_id"] = first&.message_id
  DATA["first_delivery_mode"] = first&.delivery_mode
  DATA["headers"] = first ? first.headers.to_h { |k, v| [k, typed(v)] } : nil
  q.delete
  conn.close
end

def ttl_dlx(url, prefix)
  conn = connect(url)
  ch = conn.create_channel
  dlq = ch.queue("#{prefix}.dlq")
  dl = { "x-dead-letter-exchange" => "", "x-dead-letter-routing-key" => dlq.name }
  work = ch.queue("#{prefix}.work", arguments: dl.merge("x-message-ttl" => 50))
  plain = ch.queue("#{prefix}.plain", arguments: dl)
  ch.default_exchange.publish("queue-ttl", routing_key: work.name)
  ch.default_exchange.publish("message-ttl", routing_key: plain.name, expiration: "60")
  deaths = []
  wait_until(5) do
    info, props, body = dlq.pop
    if body
      death = props.headers["x-death"].first
      deaths << { "body" => body, "header_names" => props.headers.keys.sort, "x_death_entries" => props.headers["x-death"].size,
                  "x_death" => death.to_h { |k, v| [k, typed(v)] }, "expiration_after" => props.expiration }
    end
    deaths.size == 2
  end
  check(deaths.size == 2, "dead-lettered #{deaths.size} of 2")
  DATA["deaths"] = deaths.sort_by { |d| d["body"] }
  [work, plain, dlq].each(&:delete)
  conn.close
end

def rpc(url, prefix)
  server = connect(url)
  client = connect(url)
  sch = server.create_channel
  q = sch.queue("#{prefix}.rpc", auto_delete: true)
  q.subscribe do |_info, props, body|
    DATA["reply_to_seen"] = props.reply_to.start_with?("amq.rabbitmq.reply-to.")
    sch.default_exchange.publish(body.upcase, routing_key: props.reply_to, correlation_id: props.correlation_id)
  end
  cch = client.create_channel
  replies = Queue.new
  cch.basic_consume("amq.rabbitmq.reply-to", "", true, false, {}) do |_info, props, body|
    replies << [props.correlation_id, body]
  end
  answers = []
  %w[otter beaver mink].each do |word|
    id = SecureRandom.uuid
    cch.default_exchange.publish(word, routing_key: q.name, reply_to: "amq.rabbitmq.reply-to", correlation_id: id)
    reply = pop_within(replies, 5)
    check(reply && reply[0] == id, "reply to #{word} missing or with another correlation id")
    answers << reply[1] if reply
  end
  DATA["answers"] = answers
  q.delete
  client.close
  server.close
end

def channel_error(url, prefix)
  conn = connect(url)
  ch = conn.create_channel
  missing = "#{prefix}.missing"
  DATA["missing_queue"] = missing
  begin
    ch.queue(missing, passive: true)
    check(false, "passive declare of a missing queue succeeded")
  rescue Bunny::NotFound => e
    DATA["exception"] = e.class.name
    DATA["reply_code"] = e.channel_close.reply_code
    DATA["reply_text"] = e.channel_close.reply_text
    DATA["class_method"] = [e.channel_close.class_id, e.channel_close.method_id]
  end
  DATA["channel_open"] = ch.open?
  DATA["connection_open"] = conn.open?
  again = conn.create_channel
  again.exchange("amq.direct", type: :direct, passive: true)
  DATA["new_channel_ok"] = again.open?
  conn.close
end

def recovery(url, prefix)
  conn = connect(url, recover: true)
  ch = conn.create_channel
  x = ch.direct("#{prefix}.x")
  q = ch.queue("#{prefix}.q")
  q.bind(x, routing_key: "k")
  got = Queue.new
  q.subscribe { |_i, _p, body| got << body }
  x.publish("before", routing_key: "k")
  before = pop_within(got, 5)
  check(before == "before", "no delivery before the restart")
  recovered = Queue.new
  conn.after_recovery_completed { recovered << true } # after its channels, exchanges, queues, consumers
  $stdout.puts "ready"
  $stdout.flush
  $stdin.gets # the test restarted the broker
  check(wait_until(30) { !recovered.empty? }, "the connection did not recover within 30 s")
  x.publish("after", routing_key: "k")
  after = pop_within(got, 5)
  DATA["after"] = after
  check(after == "after", "the recovered consumer got #{after.inspect}")
  q.delete
  x.delete
  conn.close
end

scenario, url, prefix = ARGV
error = nil
begin
  case scenario
  when "pubsub" then pubsub(url, prefix)
  when "ttl-dlx" then ttl_dlx(url, prefix)
  when "rpc" then rpc(url, prefix)
  when "channel-error" then channel_error(url, prefix)
  when "recovery" then recovery(url, prefix)
  else raise ArgumentError, "unknown scenario #{scenario}"
  end
rescue StandardError, Timeout::Error => e
  error = "#{e.class}: #{e.message}"
end
puts JSON.generate({ "ok" => error.nil? && FAILURES.empty?, "error" => error, "failures" => FAILURES, "data" => DATA })
$stdout.flush
exit!(0)
