// The .NET RabbitMQ.Client that Debian ships (Mono's libmono-rabbitmq4.0-cil: RabbitMQ's .NET client of the
// 1.x line, bundled with Mono; it speaks AMQP 0-8, its default, and 0-9) against the broker under test.
//
// One scenario per run: mono OtterE2E.exe <scenario> <amqp-uri> <prefix>, with OTTER_AMQP_PROTOCOL=AMQP_0_8
// (the default) or AMQP_0_9. It prints one JSON object {"ok", "error", "failures", "data"} on stdout, as the
// other client programs (e2e/client_programs.py). Every name it declares starts with <prefix> and is
// deleted at the end. Scenarios:
//   pubsub         persistent messages with typed headers, an EventingBasicConsumer with manual acks and
//                  prefetch 10
//   ttl-dlx        the TTL and dead-lettering examples: a queue with x-message-ttl and a dead-letter
//                  exchange, a message with Expiration, x-death read back with the types the client decodes
//   rpc            request/reply over direct reply-to (amq.rabbitmq.reply-to)
//   channel-error  a passive declare of a missing queue: OperationInterruptedException with the 404, the
//                  channel closed, the connection and a new channel carry on
using System;
using System.Collections;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;
using System.Text;
using System.Threading;
using RabbitMQ.Client;
using RabbitMQ.Client.Events;
using RabbitMQ.Client.Exceptions;

public static class OtterE2E
{
    static readonly Dictionary<string, object> Data = new Dictionary<string, object>();
    static readonly List<string> Failures = new List<string>();
    static string Prefix;

    public static int Main(string[] args)
    {
        string error = null;
        Prefix = args[2];
        try
        {
            var uri = new Uri(args[1]);
            switch (args[0])
            {
                case "pubsub": PubSub(uri); break;
                case "ttl-dlx": TtlDlx(uri); break;
                case "rpc": Rpc(uri); break;
                case "channel-error": ChannelError(uri); break;
                default: throw new ArgumentException("unknown scenario " + args[0]);
            }
        }
        catch (Exception e)
        {
            error = e.GetType().Name + ": " + e.Message;
        }
        var output = new Dictionary<string, object> {
            {"ok", error == null && Failures.Count == 0}, {"error", error}, {"failures", Failures}, {"data", Data}};
        Console.WriteLine(Json(output));
        return 0;
    }

    static void Check(bool ok, string what)
    {
        if (!ok) Failures.Add(what);
    }

    static IConnection Connect(Uri uri)
    {
        var factory = new ConnectionFactory();
        string name = Environment.GetEnvironmentVariable("OTTER_AMQP_PROTOCOL") ?? "AMQP_0_8";
        factory.Protocol = Protocols.Lookup(name);
        factory.HostName = uri.Host;
        factory.Port = uri.Port;
        string[] login = Uri.UnescapeDataString(uri.UserInfo).Split(':');
        factory.UserName = login[0];
        factory.Password = login[1];
        string path = uri.AbsolutePath;
        factory.VirtualHost = path.Length > 1 ? Uri.UnescapeDataString(path.Substring(1)) : "/";
        factory.RequestedHeartbeat = 0;
        Data["protocol"] = factory.Protocol.ApiName;
        return factory.CreateConnection();
    }

    static string Text(byte[] body)
    {
        return Encoding.UTF8.GetString(body);
    }

    // -- pubsub --------------------------------------------------------------------------------------------
    static void PubSub(Uri uri)
    {
        const int n = 200;
        using (var conn = Connect(uri))
        {
            IModel ch = conn.CreateModel();
            string q = Prefix + ".q";
            ch.QueueDeclare(q, false, true, false, false, false, null);
            var headers = new Hashtable {
                {"int", 42}, {"long", 1L << 40}, {"string", "otter"}, {"bool", true},
                {"list", new ArrayList {"a", 1}}, {"table", new Hashtable {{"nested", "yes"}}}};
            for (int i = 0; i < n; i++)
            {
                IBasicProperties props = ch.CreateBasicProperties();
                props.DeliveryMode = 2;
                props.ContentType = "text/plain";
                props.MessageId = "m" + i;
                props.Headers = headers;
                ch.BasicPublish("", q, props, Encoding.UTF8.GetBytes("m" + i));
            }
            IModel consumer = conn.CreateModel();
            consumer.BasicQos(0, 10, false);
            var bodies = new List<string>();
            var all = new ManualResetEvent(false);
            var deliveries = new EventingBasicConsumer();
            deliveries.Received += (sender, e) => {
                lock (bodies)
                {
                    if (bodies.Count == 0)
                    {
                        Data["first_message_id"] = e.BasicProperties.MessageId;
                        Data["first_delivery_mode"] = (int)e.BasicProperties.DeliveryMode;
                        Data["headers"] = Typed(e.BasicProperties.Headers);
                    }
                    bodies.Add(Text(e.Body));
                    consumer.BasicAck(e.DeliveryTag, false);
                    if (bodies.Count == n) all.Set();
                }
            };
            consumer.BasicConsume(q, false, null, deliveries);
            Check(all.WaitOne(10000), "consumed " + bodies.Count + " of " + n);
            lock (bodies)
            {
                Data["consumed"] = bodies.Count;
                Data["in_order"] = bodies.SequenceEqual(Enumerable.Range(0, n).Select(i => "m" + i));
            }
            ch.QueueDelete(q, false, false, false);
        }
    }

    // -- ttl-dlx -------------------------------------------------------------------------------------------
    static void TtlDlx(Uri uri)
    {
        using (var conn = Connect(uri))
        {
            IModel ch = conn.CreateModel();
            string dlq = Prefix + ".dlq", work = Prefix + ".work", plain = Prefix + ".plain";
            ch.QueueDeclare(dlq, false, false, false, false, false, null);
            var args = new Hashtable {
                {"x-message-ttl", 50}, {"x-dead-letter-exchange", ""}, {"x-dead-letter-routing-key", dlq}};
            ch.QueueDeclare(work, false, false, false, false, false, args);
            var plainArgs = new Hashtable {{"x-dead-letter-exchange", ""}, {"x-dead-letter-routing-key", dlq}};
            ch.QueueDeclare(plain, false, false, false, false, false, plainArgs);
            ch.BasicPublish("", work, null, Encoding.UTF8.GetBytes("queue-ttl"));
            IBasicProperties props = ch.CreateBasicProperties();
            props.Expiration = "60";
            ch.BasicPublish("", plain, props, Encoding.UTF8.GetBytes("message-ttl"));
            var deaths = new List<Dictionary<string, object>>();
            DateTime deadline = DateTime.UtcNow.AddSeconds(5);
            while (deaths.Count < 2 && DateTime.UtcNow < deadline)
            {
                BasicGetResult r = ch.BasicGet(dlq, true);
                if (r == null)
                {
                    Thread.Sleep(20);
                    continue;
                }
                IDictionary h = r.BasicProperties.Headers;
                var names = h.Keys.Cast<object>().Select(k => k.ToString()).OrderBy(k => k, StringComparer.Ordinal).ToList();
                var xdeath = (IList)h["x-death"];
                var fields = new SortedDictionary<string, object>(StringComparer.Ordinal);
                foreach (DictionaryEntry e in (IDictionary)xdeath[0]) fields[e.Key.ToString()] = Typed(e.Value);
                string expiration = r.BasicProperties.IsExpirationPresent() ? r.BasicProperties.Expiration : null;
                deaths.Add(new Dictionary<string, object> {
                    {"body", Text(r.Body)}, {"header_names", names}, {"x_death_entries", xdeath.Count},
                    {"x_death", fields}, {"expiration_after", expiration}});
            }
            Data["deaths"] = deaths.OrderBy(d => (string)d["body"], StringComparer.Ordinal).ToList();
            Check(deaths.Count == 2, "dead-lettered " + deaths.Count + " of 2");
            foreach (string q in new[] {work, plain, dlq}) ch.QueueDelete(q, false, false, false);
        }
    }

    // -- rpc -----------------------------------------------------------------------------------------------
    static void Rpc(Uri uri)
    {
        using (var server = Connect(uri))
        using (var client = Connect(uri))
        {
            string q = Prefix + ".rpc";
            IModel sch = server.CreateModel();
            sch.QueueDeclare(q, false, false, false, true, false, null);
            var requests = new EventingBasicConsumer();
            requests.Received += (sender, e) => {
                IBasicProperties reply = sch.CreateBasicProperties();
                reply.CorrelationId = e.BasicProperties.CorrelationId;
                Data["reply_to_seen"] = e.BasicProperties.ReplyTo.StartsWith("amq.rabbitmq.reply-to.");
                sch.BasicPublish("", e.BasicProperties.ReplyTo, reply, Encoding.UTF8.GetBytes(Text(e.Body).ToUpperInvariant()));
            };
            sch.BasicConsume(q, true, null, requests);
            IModel cch = client.CreateModel();
            var replies = new QueueingBasicConsumer(cch);
            cch.BasicConsume("amq.rabbitmq.reply-to", true, null, replies);
            var answers = new List<string>();
            foreach (string word in new[] {"otter", "beaver", "mink"})
            {
                string id = Guid.NewGuid().ToString();
                IBasicProperties props = cch.CreateBasicProperties();
                props.CorrelationId = id;
                props.ReplyTo = "amq.rabbitmq.reply-to";
                cch.BasicPublish("", q, props, Encoding.UTF8.GetBytes(word));
                object got;
                if (!replies.Queue.Dequeue(5000, out got))
                {
                    Check(false, "no reply to " + word);
                    continue;
                }
                var delivery = (BasicDeliverEventArgs)got;
                Check(delivery.BasicProperties.CorrelationId == id, "the reply to " + word + " has another correlation id");
                answers.Add(Text(delivery.Body));
            }
            Data["answers"] = answers;
            sch.QueueDelete(q, false, false, false);
        }
    }

    // -- channel-error -------------------------------------------------------------------------------------
    static void ChannelError(Uri uri)
    {
        using (var conn = Connect(uri))
        {
            IModel ch = conn.CreateModel();
            string missing = Prefix + ".missing";
            Data["missing_queue"] = missing;
            try
            {
                ch.QueueDeclare(missing, true, false, false, false, false, null);
                Check(false, "passive declare of a missing queue succeeded");
            }
            catch (OperationInterruptedException e)
            {
                Data["exception"] = e.GetType().Name;
                Data["reply_code"] = (int)e.ShutdownReason.ReplyCode;
                Data["reply_text"] = e.ShutdownReason.ReplyText;
                Data["class_method"] = new List<object> {(int)e.ShutdownReason.ClassId, (int)e.ShutdownReason.MethodId};
            }
            Data["channel_open"] = ch.IsOpen;
            Data["connection_open"] = conn.IsOpen;
            IModel again = conn.CreateModel();
            again.ExchangeDeclare("amq.direct", "direct", true);
            Data["new_channel_ok"] = again.IsOpen;
        }
    }

    // -- helpers -------------------------------------------------------------------------------------------
    /** A header value as {"type": .NET type, "value": ...}, the way the client decoded it. */
    static object Typed(object v)
    {
        if (v == null) return null;
        var result = new Dictionary<string, object> {{"type", v.GetType().Name}};
        if (v is byte[]) result["value"] = Text((byte[])v);
        else if (v is IDictionary)
        {
            var table = new SortedDictionary<string, object>(StringComparer.Ordinal);
            foreach (DictionaryEntry e in (IDictionary)v) table[e.Key.ToString()] = Typed(e.Value);
            result["value"] = table;
        }
        else if (v is IList) result["value"] = ((IList)v).Cast<object>().Select(Typed).ToList();
        else if (v is AmqpTimestamp) result["value"] = ((AmqpTimestamp)v).UnixTime;
        else result["value"] = v;
        return result;
    }

    static string Json(object v)
    {
        if (v == null) return "null";
        if (v is string) return Quote((string)v);
        if (v is bool) return (bool)v ? "true" : "false";
        if (v is IDictionary<string, object>)
            return "{" + string.Join(",", ((IDictionary<string, object>)v).Select(e => Quote(e.Key) + ":" + Json(e.Value))) + "}";
        if (v is IDictionary)
            return "{" + string.Join(",", ((IDictionary)v).Cast<DictionaryEntry>().Select(e => Quote(e.Key.ToString()) + ":" + Json(e.Value))) + "}";
        if (v is IEnumerable) return "[" + string.Join(",", ((IEnumerable)v).Cast<object>().Select(Json)) + "]";
        return Convert.ToString(v, CultureInfo.InvariantCulture).ToLowerInvariant() == "true" ? "true" : Convert.ToString(v, CultureInfo.InvariantCulture);
    }

    static string Quote(string s)
    {
        var sb = new StringBuilder("\"");
        foreach (char c in s)
        {
            if (c == '"' || c == '\\') sb.Append('\\').Append(c);
            else if (c < ' ') sb.AppendFormat("\\u{0:x4}", (int)c);
            else sb.Append(c);
        }
        return sb.Append('"').ToString();
    }
}
