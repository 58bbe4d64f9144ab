// RabbitMQ's Java client (Debian's librabbitmq-client-java, amqp-client 5.x) against the broker under test.
//
// One program, one scenario per run: java OtterE2E <scenario> <amqp-uri> <prefix>. It prints one JSON
// object {"ok": bool, "error": text|null, "failures": [...], "data": {...}} on stdout; e2e/test_java_client.py
// asserts on "data" and the program checks itself ("failures"). Every name it declares starts with <prefix>
// and is deleted at the end. Scenarios:
//   pubsub         confirms (waitForConfirmsOrDie and a ConfirmListener), typed headers, a consumer with
//                  manual acks and prefetch 10
//   ttl-dlx        queue TTL and per-message expiration dead-lettered through the default exchange; x-death
//                  read back with the Java types the client decodes
//   rpc            request/reply over direct reply-to (amq.rabbitmq.reply-to)
//   channel-error  a passive declare of a missing queue: the channel's ShutdownListener gets the 404, the
//                  connection and a new channel carry on
//   recovery       automatic connection and topology recovery: prints "ready" and waits for a line on stdin
//                  (the test restarts the broker meanwhile), then checks the recovered consumer gets a
//                  message published after the restart
// Any scenario runs over TLS when the URI is amqps:// (useTls: OTTER_TLS_CA, _CERT, _KEY, _EXTERNAL).
import com.rabbitmq.client.*;

import javax.net.ssl.*;
import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicLong;

public class OtterE2E {
    static final Map<String, Object> DATA = new LinkedHashMap<>();
    static final List<String> FAILURES = new ArrayList<>();
    static String uri;
    static String prefix;

    public static void main(String[] args) {
        String error = null;
        uri = args[1];
        prefix = args[2];
        try {
            switch (args[0]) {
                case "pubsub": pubsub(); break;
                case "ttl-dlx": ttlDlx(); break;
                case "rpc": rpc(); break;
                case "channel-error": channelError(); break;
                case "recovery": recovery(); break;
                default: throw new IllegalArgumentException("unknown scenario " + args[0]);
            }
        } catch (Throwable e) {
            error = e.toString();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("ok", error == null && FAILURES.isEmpty());
        out.put("error", error);
        out.put("failures", FAILURES);
        out.put("data", DATA);
        System.out.println(json(out));
        System.out.flush();
        System.exit(0);
    }

    static void check(boolean ok, String what) {
        if (!ok) FAILURES.add(what);
    }

    static Connection connect(boolean recovery) throws Exception {
        ConnectionFactory f = new ConnectionFactory();
        f.setUri(uri);
        f.setAutomaticRecoveryEnabled(recovery);
        f.setTopologyRecoveryEnabled(recovery);
        f.setNetworkRecoveryInterval(200);
        f.setConnectionTimeout(5000);
        if (uri.startsWith("amqps://")) useTls(f);
        return f.newConnection("ottermq-e2e-java");
    }

    /** TLS from OTTER_TLS_CA (PEM), optionally a client certificate OTTER_TLS_CERT with its PKCS#8 key
     *  OTTER_TLS_KEY, and SASL EXTERNAL when OTTER_TLS_EXTERNAL=1. The server's certificate is checked
     *  against the CA and the URL's host name (the client's 5.0 has no switch for that: an SSLSocket
     *  parameter set before the handshake). */
    static void useTls(ConnectionFactory f) throws Exception {
        CertificateFactory x509 = CertificateFactory.getInstance("X.509");
        KeyStore trusted = KeyStore.getInstance("PKCS12");
        trusted.load(null, null);
        trusted.setCertificateEntry("ca", readCertificate(x509, System.getenv("OTTER_TLS_CA")));
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(trusted);
        KeyManager[] keys = null;
        String cert = System.getenv("OTTER_TLS_CERT");
        if (cert != null) {
            String pem = new String(Files.readAllBytes(Paths.get(System.getenv("OTTER_TLS_KEY"))), StandardCharsets.US_ASCII);
            byte[] der = Base64.getDecoder().decode(pem.replaceAll("-----[A-Z ]+-----", "").replaceAll("\\s", ""));
            PrivateKey key = KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(der));
            char[] password = "otter".toCharArray();
            KeyStore mine = KeyStore.getInstance("PKCS12");
            mine.load(null, null);
            mine.setKeyEntry("client", key, password, new Certificate[]{readCertificate(x509, cert)});
            KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(mine, password);
            keys = kmf.getKeyManagers();
        }
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(keys, tmf.getTrustManagers(), null);
        f.useSslProtocol(context);
        f.setSocketConfigurator(socket -> {
            socket.setTcpNoDelay(true);
            SSLParameters parameters = ((SSLSocket) socket).getSSLParameters();
            parameters.setEndpointIdentificationAlgorithm("HTTPS");
            ((SSLSocket) socket).setSSLParameters(parameters);
        });
        if ("1".equals(System.getenv("OTTER_TLS_EXTERNAL"))) f.setSaslConfig(DefaultSaslConfig.EXTERNAL);
    }

    static Certificate readCertificate(CertificateFactory x509, String path) throws Exception {
        try (InputStream in = new FileInputStream(path)) {
            return x509.generateCertificate(in);
        }
    }

    // -- pubsub ------------------------------------------------------------------------------------------
    static void pubsub() throws Exception {
        int n = 200;
        try (Connection conn = connect(false)) {
            Channel ch = conn.createChannel();
            String q = prefix + ".q";
            ch.queueDeclare(q, true, false, false, null);
            ch.confirmSelect();
            AtomicLong acked = new AtomicLong();
            Set<Long> seen = ConcurrentHashMap.newKeySet();
            List<Long> nacked = Collections.synchronizedList(new ArrayList<>());
            SortedSet<Long> outstanding = Collections.synchronizedSortedSet(new TreeSet<>());
            ch.addConfirmListener(new ConfirmListener() {
                public void handleAck(long tag, boolean multiple) {
                    settle(tag, multiple);
                }

                public void handleNack(long tag, boolean multiple) {
                    nacked.add(tag);
                    settle(tag, multiple);
                }

                void settle(long tag, boolean multiple) {
                    synchronized (outstanding) {
                        Collection<Long> done = multiple ? new ArrayList<>(outstanding.headSet(tag + 1)) : List.of(tag);
                        for (Long t : done) {
                            if (outstanding.remove(t)) {
                                seen.add(t);
                                acked.incrementAndGet();
                            }
                        }
                    }
                }
            });
            Map<String, Object> headers = new LinkedHashMap<>();
            headers.put("int", 42);
            headers.put("long", 1L << 40);
            headers.put("string", "otter");
            headers.put("bool", true);
            headers.put("double", 1.5);
            headers.put("list", Arrays.asList("a", 1));
            headers.put("table", Map.of("nested", "yes"));
            for (int i = 0; i < n; i++) {
                outstanding.add(ch.getNextPublishSeqNo());
                AMQP.BasicProperties props = new AMQP.BasicProperties.Builder()
                        .deliveryMode(2).contentType("text/plain").messageId("m" + i).headers(headers).build();
                ch.basicPublish("", q, props, ("m" + i).getBytes(StandardCharsets.UTF_8));
            }
            ch.waitForConfirmsOrDie(5000);
            long deadline = System.currentTimeMillis() + 5000;
            while (acked.get() < n && System.currentTimeMillis() < deadline) Thread.sleep(10);
            DATA.put("confirmed_by_listener", acked.get());
            DATA.put("nacked", nacked.size());
            check(acked.get() == n, "the ConfirmListener settled " + acked.get() + " of " + n);

            Channel consumer = conn.createChannel();
            consumer.basicQos(10);
            List<String> bodies = Collections.synchronizedList(new ArrayList<>());
            List<Integer> unackedSeen = Collections.synchronizedList(new ArrayList<>());
            Map<String, Object> firstHeaders = new LinkedHashMap<>();
            CountDownLatch all = new CountDownLatch(n);
            consumer.basicConsume(q, false, new DefaultConsumer(consumer) {
                int inFlight = 0;

                @Override
                public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties p, byte[] body) throws java.io.IOException {
                    if (bodies.isEmpty()) {
                        for (Map.Entry<String, Object> e : p.getHeaders().entrySet()) firstHeaders.put(e.getKey(), typed(e.getValue()));
                        DATA.put("first_message_id", p.getMessageId());
                        DATA.put("first_content_type", p.getContentType());
                        DATA.put("first_delivery_mode", p.getDeliveryMode());
                    }
                    bodies.add(new String(body, StandardCharsets.UTF_8));
                    getChannel().basicAck(env.getDeliveryTag(), false);
                    all.countDown();
                }
            });
            check(all.await(10, TimeUnit.SECONDS), "consumed " + bodies.size() + " of " + n);
            List<String> expected = new ArrayList<>();
            for (int i = 0; i < n; i++) expected.add("m" + i);
            DATA.put("consumed", bodies.size());
            DATA.put("in_order", expected.equals(bodies));
            DATA.put("headers", firstHeaders);
            consumer.close();
            ch.queueDelete(q);
        }
    }

    // -- ttl-dlx -----------------------------------------------------------------------------------------
    static void ttlDlx() throws Exception {
        try (Connection conn = connect(false)) {
            Channel ch = conn.createChannel();
            String dlq = prefix + ".dlq", work = prefix + ".work", plain = prefix + ".plain";
            ch.queueDeclare(dlq, false, false, false, null);
            Map<String, Object> args = new HashMap<>();
            args.put("x-message-ttl", 50);
            args.put("x-dead-letter-exchange", "");
            args.put("x-dead-letter-routing-key", dlq);
            ch.queueDeclare(work, false, false, false, args);
            Map<String, Object> plainArgs = new HashMap<>();
            plainArgs.put("x-dead-letter-exchange", "");
            plainArgs.put("x-dead-letter-routing-key", dlq);
            ch.queueDeclare(plain, false, false, false, plainArgs);
            ch.basicPublish("", work, null, "queue-ttl".getBytes(StandardCharsets.UTF_8));
            ch.basicPublish("", plain, new AMQP.BasicProperties.Builder().expiration("60").build(),
                    "message-ttl".getBytes(StandardCharsets.UTF_8));
            List<Map<String, Object>> deaths = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 5000;
            while (deaths.size() < 2 && System.currentTimeMillis() < deadline) {
                GetResponse r = ch.basicGet(dlq, true);
                if (r == null) {
                    Thread.sleep(20);
                    continue;
                }
                Map<String, Object> death = new LinkedHashMap<>();
                death.put("body", new String(r.getBody(), StandardCharsets.UTF_8));
                Map<String, Object> h = r.getProps().getHeaders();
                death.put("header_names", new TreeSet<>(h.keySet()));
                @SuppressWarnings("unchecked")
                List<Object> xdeath = (List<Object>) h.get("x-death");
                death.put("x_death_entries", xdeath.size());
                @SuppressWarnings("unchecked")
                Map<String, Object> entry = (Map<String, Object>) xdeath.get(0);
                Map<String, Object> fields = new TreeMap<>();
                for (Map.Entry<String, Object> e : entry.entrySet()) fields.put(e.getKey(), typed(e.getValue()));
                death.put("x_death", fields);
                death.put("x_first_death_reason", String.valueOf(h.get("x-first-death-reason")));
                death.put("expiration_after", r.getProps().getExpiration());
                deaths.add(death);
            }
            deaths.sort(Comparator.comparing(d -> (String) d.get("body")));
            DATA.put("deaths", deaths);
            check(deaths.size() == 2, "dead-lettered " + deaths.size() + " of 2");
            for (String q : List.of(work, plain, dlq)) ch.queueDelete(q);
        }
    }

    // -- rpc ---------------------------------------------------------------------------------------------
    static void rpc() throws Exception {
        try (Connection server = connect(false); Connection client = connect(false)) {
            String q = prefix + ".rpc";
            Channel sch = server.createChannel();
            sch.queueDeclare(q, false, false, true, null);
            sch.basicConsume(q, true, new DefaultConsumer(sch) {
                @Override
                public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties p, byte[] body) throws java.io.IOException {
                    AMQP.BasicProperties reply = new AMQP.BasicProperties.Builder().correlationId(p.getCorrelationId()).build();
                    String text = new String(body, StandardCharsets.UTF_8).toUpperCase();
                    getChannel().basicPublish("", p.getReplyTo(), reply, text.getBytes(StandardCharsets.UTF_8));
                    DATA.put("reply_to_seen", p.getReplyTo().startsWith("amq.rabbitmq.reply-to."));
                }
            });
            Channel cch = client.createChannel();
            BlockingQueue<String[]> replies = new LinkedBlockingQueue<>();
            cch.basicConsume("amq.rabbitmq.reply-to", true, new DefaultConsumer(cch) {
                @Override
                public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties p, byte[] body) {
                    replies.add(new String[]{p.getCorrelationId(), new String(body, StandardCharsets.UTF_8)});
                }
            });
            List<String> answers = new ArrayList<>();
            for (String word : List.of("otter", "beaver", "mink")) {
                String id = UUID.randomUUID().toString();
                cch.basicPublish("", q, new AMQP.BasicProperties.Builder().correlationId(id).replyTo("amq.rabbitmq.reply-to").build(),
                        word.getBytes(StandardCharsets.UTF_8));
                String[] r = replies.poll(5, TimeUnit.SECONDS);
                check(r != null && id.equals(r[0]), "reply to " + word + " missing or with another correlation id");
                if (r != null) answers.add(r[1]);
            }
            DATA.put("answers", answers);
            sch.queueDelete(q);
        }
    }

    // -- channel-error -------------------------------------------------------------------------------------
    static void channelError() throws Exception {
        try (Connection conn = connect(false)) {
            Channel ch = conn.createChannel();
            BlockingQueue<ShutdownSignalException> shut = new LinkedBlockingQueue<>();
            ch.addShutdownListener(shut::add);
            String missing = prefix + ".missing";
            DATA.put("missing_queue", missing);
            try {
                ch.queueDeclarePassive(missing);
                check(false, "passive declare of a missing queue succeeded");
            } catch (java.io.IOException e) {
                DATA.put("exception_cause", e.getCause() == null ? null : e.getCause().getClass().getSimpleName());
            }
            ShutdownSignalException s = shut.poll(5, TimeUnit.SECONDS);
            check(s != null, "the ShutdownListener was not called");
            if (s != null) {
                AMQP.Channel.Close close = (AMQP.Channel.Close) s.getReason();
                DATA.put("hard_error", s.isHardError());
                DATA.put("initiated_by_application", s.isInitiatedByApplication());
                DATA.put("reply_code", close.getReplyCode());
                DATA.put("reply_text", close.getReplyText());
                DATA.put("class_method", List.of(close.getClassId(), close.getMethodId()));
            }
            DATA.put("channel_open", ch.isOpen());
            DATA.put("connection_open", conn.isOpen());
            Channel again = conn.createChannel();
            again.exchangeDeclarePassive("amq.direct");
            DATA.put("new_channel_ok", again.isOpen());
        }
    }

    // -- recovery ------------------------------------------------------------------------------------------
    static void recovery() throws Exception {
        Connection conn = connect(true);
        try {
            String x = prefix + ".x", q = prefix + ".q";
            Channel ch = conn.createChannel();
            ch.exchangeDeclare(x, "direct", false, false, null);
            ch.queueDeclare(q, false, false, false, null);  // transient: gone with the broker, redeclared
            ch.queueBind(q, x, "k");
            BlockingQueue<String> got = new LinkedBlockingQueue<>();
            ch.basicConsume(q, true, new DefaultConsumer(ch) {
                @Override
                public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties p, byte[] body) {
                    got.add(new String(body, StandardCharsets.UTF_8));
                }
            });
            ch.basicPublish(x, "k", null, "before".getBytes(StandardCharsets.UTF_8));
            check("before".equals(got.poll(5, TimeUnit.SECONDS)), "no delivery before the restart");
            CountDownLatch recovered = new CountDownLatch(1);
            List<String> events = Collections.synchronizedList(new ArrayList<>());
            ((Recoverable) conn).addRecoveryListener(new RecoveryListener() {
                public void handleRecovery(Recoverable r) {
                    events.add("recovered");
                    recovered.countDown();
                }

                public void handleRecoveryStarted(Recoverable r) {
                    events.add("started");
                }
            });
            BlockingQueue<String> shutdowns = new LinkedBlockingQueue<>();
            conn.addShutdownListener(s -> shutdowns.add(s.getReason() instanceof AMQP.Connection.Close
                    ? ((AMQP.Connection.Close) s.getReason()).getReplyCode() + "" : s.getClass().getSimpleName()));
            System.out.println("ready");
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in)).readLine();  // the test restarted the broker
            check(recovered.await(30, TimeUnit.SECONDS), "the connection did not recover within 30 s");
            DATA.put("events", new ArrayList<>(events));
            DATA.put("shutdown", shutdowns.poll());
            ch.basicPublish(x, "k", null, "after".getBytes(StandardCharsets.UTF_8));
            String after = got.poll(5, TimeUnit.SECONDS);
            DATA.put("after", after);
            check("after".equals(after), "the recovered consumer got " + after);
            ch.queueDelete(q);
            ch.exchangeDelete(x);
        } finally {
            conn.abort();
        }
    }

    // -- helpers -------------------------------------------------------------------------------------------
    /** A header value as {"type": Java class, "value": ...}, the way the client decoded it. */
    static Object typed(Object v) {
        Map<String, Object> t = new LinkedHashMap<>();
        t.put("type", v == null ? "null" : v.getClass().getSimpleName());
        if (v instanceof LongString || v instanceof byte[]) {
            t.put("value", v.toString());
        } else if (v instanceof Date) {
            t.put("value", ((Date) v).getTime() / 1000);
        } else if (v instanceof Map) {
            Map<String, Object> m = new TreeMap<>();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) m.put(String.valueOf(e.getKey()), typed(e.getValue()));
            t.put("value", m);
        } else if (v instanceof List) {
            List<Object> l = new ArrayList<>();
            for (Object o : (List<?>) v) l.add(typed(o));
            t.put("value", l);
        } else {
            t.put("value", v);
        }
        return t;
    }

    static String json(Object v) {
        if (v == null) return "null";
        if (v instanceof String) {
            StringBuilder b = new StringBuilder("\"");
            for (char c : ((String) v).toCharArray()) {
                if (c == '"' || c == '\\') b.append('\\').append(c);
                else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                else b.append(c);
            }
            return b.append('"').toString();
        }
        if (v instanceof Number || v instanceof Boolean) return v.toString();
        if (v instanceof Map) {
            StringJoiner j = new StringJoiner(",", "{", "}");
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) j.add(json(String.valueOf(e.getKey())) + ":" + json(e.getValue()));
            return j.toString();
        }
        if (v instanceof Collection) {
            StringJoiner j = new StringJoiner(",", "[", "]");
            for (Object o : (Collection<?>) v) j.add(json(o));
            return j.toString();
        }
        return json(v.toString());
    }
}
