//! Issue #48: the Redis that production runs. Each test starts real
//! redis-server processes on free loopback ports (TLS with certificates the
//! test makes with the openssl CLI and an ACL user; a three-master cluster
//! with replicas; a sentinel with a master and a replica) and two
//! `modelshim` processes sharing them: a stored response made on one is
//! continued on the other, and one key's token budget is enforced across
//! both. The cluster and sentinel tests fail over between the two halves.
//!
//! Needs `redis-server`, `redis-cli` (Debian `redis-server`, `redis-tools`)
//! and `openssl`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const ALICE: &str = "sk-alice-redis-modes";
/// A key without budgets.
const BOB: &str = "sk-bob-redis-modes";

/// Server processes of one test, killed on drop (with their temp dir).
struct Servers {
    children: Vec<(u16, Child)>,
    dir: tempfile::TempDir,
}

impl Drop for Servers {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Servers {
    fn new() -> Self {
        Servers { children: Vec::new(), dir: tempfile::tempdir().unwrap() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `redis-server` with `args` (config file first, if any), listening on
    /// `port` once this returns.
    fn start(&mut self, port: u16, args: &[String]) {
        let log = std::fs::File::create(self.path(&format!("redis-{port}.log"))).unwrap();
        let child = Command::new("redis-server")
            .args(args)
            .current_dir(self.dir.path())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server ({e}): `apt-get install -y redis-server`"));
        self.children.push((port, child));
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "redis-server did not come up on {port}: {}",
                self.log(port)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self, port: u16) -> String {
        std::fs::read_to_string(self.path(&format!("redis-{port}.log"))).unwrap_or_default()
    }

    fn kill_all(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn kill(&mut self, port: u16) {
        for (p, c) in &mut self.children {
            if *p == port {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// `redis-cli -p port` with options `o` (auth, TLS) and `args`, its stdout
/// (within 20 s: redis-cli itself waits for ever).
fn cli(port: u16, o: &[&str], args: &[&str]) -> String {
    let out = Command::new("timeout")
        .args(["20", "redis-cli", "-h", "127.0.0.1", "-p", &port.to_string()])
        .args(o)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("redis-cli (apt-get install redis-tools)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `f` every 50 ms until it is true; panics with `what` after `secs`.
fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(secs), "{what} within {secs} s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An upstream that answers every request with 30 tokens of usage.
async fn upstream() -> MockServer {
    let server = MockServer::start().await;
    let mut c = completion(json!({"role": "assistant", "content": "ok"}), "stop");
    c["usage"] = json!({"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30});
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200).set_body_json(c)).mount(&server).await;
    server
}

/// The config of both processes: key `alice` with 50 tokens a day, and the
/// `[state]` lines under test. With prices, so each of alice's four
/// counters exists (a migrating slot serves a script over several keys only
/// once all of them have moved: TRYAGAIN before).
fn config(upstream: &str, state: &str) -> String {
    format!(
        r#"
[providers.v]
base_url = "{upstream}/v1"
models = ["m"]
[providers.v.prices."m"]
input = 1.0
output = 2.0
[auth]
keys = [{{ key = "{ALICE}", name = "alice", tokens_per_day = 50 }}, {{ key = "{BOB}", name = "bob" }}]
[state]
{state}
"#
    )
}

async fn respond(p: &Proxy, body: Value) -> (u16, Value) {
    let r = p.http.post(p.url("/v1/responses")).bearer_auth(ALICE).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

async fn chat(p: &Proxy) -> (u16, Value) {
    let body = json!({"model": "v/m", "messages": [{"role": "user", "content": "hi"}]});
    let r = p.http.post(p.url("/v1/chat/completions")).bearer_auth(ALICE).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

async fn usage(p: &Proxy) -> Value {
    let r = p.http.get(p.url("/v1/usage")).bearer_auth(ALICE).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// `/v1/usage` of `p` until today's tokens are `n` (charges are pushed just
/// after a response, and a failover costs a reconnect).
async fn tokens_become(p: &Proxy, n: u64) {
    let t = Instant::now();
    loop {
        let u = usage(p).await;
        if u["today"]["tokens"] == n {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(15), "today's tokens never became {n}: {u}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// First half of the shared-state scenario: a stored response made on `a`
/// (30 of alice's 50 tokens), seen by `b`. Returns the response id.
async fn first_half(a: &Proxy, b: &Proxy) -> String {
    let (st, r1) = respond(a, json!({"model": "v/m", "input": "first"})).await;
    assert_eq!(st, 200, "{r1}");
    tokens_become(b, 30).await;
    r1["id"].as_str().unwrap().to_string()
}

/// Second half: `b` continues `a`'s response (it has A's history), then
/// both see 60 tokens used and refuse alice's next request.
async fn second_half(a: &Proxy, b: &Proxy, server: &MockServer, id: &str) {
    let (st, r2) = respond(b, json!({"model": "v/m", "input": "second", "previous_response_id": id})).await;
    assert_eq!(st, 200, "B could not continue A's response: {r2}");
    let reqs = server.received_requests().await.unwrap();
    let sent: Value = serde_json::from_slice(&reqs.last().unwrap().body).unwrap();
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "second"}])
    );
    tokens_become(a, 60).await;
    for p in [a, b] {
        let (st, body) = chat(p).await;
        assert_eq!(st, 429, "one budget across both processes: {body}");
        assert_eq!(body["error"]["code"], "insufficient_quota");
    }
    assert_eq!(server.received_requests().await.unwrap().len(), 2, "the refusals never reached the upstream");
}

/// Every Redis server gone: `p` still serves (bob gets his answer, a
/// stored response just is not stored), alice is still refused from what
/// `p` counted itself, each within the bounded Redis wait, and the gauge
/// says the store is down.
async fn serves_degraded(p: &Proxy) {
    let t = Instant::now();
    let body = json!({"model": "v/m", "input": "while Redis is away"});
    let r = p.http.post(p.url("/v1/responses")).bearer_auth(BOB).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(chat(p).await.0, 429, "alice's budget, enforced from the local count");
    assert!(t.elapsed() < Duration::from_secs(6), "the store's waits are bounded: {:?}", t.elapsed());
    let m = reqwest::get(p.url("/metrics")).await.unwrap().text().await.unwrap();
    assert!(m.contains("modelshim_state_backend_up{backend=\"redis\"} 0"), "{m}");
}

/// Both processes' logs: they name the store and never hold `secret`.
fn logs_keep_secret(procs: &[&ServeProcess], secret: &str) {
    for p in procs {
        let log = p.log();
        assert!(log.contains("shared state in redis"), "{log}");
        assert!(!log.contains(secret), "the Redis password reached the log:\n{log}");
    }
}

/// A process env that logs at debug (startup lines and every Redis error).
const VERBOSE: (&str, &str) = ("RUST_LOG", "info,modelshim=debug");

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made
/// with the openssl CLI in `dir`.
fn make_certs(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl CLI");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run(&[
        &["req", "-x509"],
        &ec[..],
        &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=modelshim test CA"],
    ]
    .concat());
    // clientAuth too: cluster nodes present it to each other on the TLS bus.
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
        .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for who in ["server", "client"] {
        let (key, csr, crt, ext) =
            (format!("{who}.key"), format!("{who}.csr"), format!("{who}.crt"), format!("{who}.ext"));
        run(&[&["req"], &ec[..], &["-keyout", &key, "-out", &csr, "-subj", &format!("/CN={who}")]].concat());
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
    }
}

/// TLS (server verified against the test's CA, a client certificate) and
/// an ACL user whose password comes from the environment.
#[tokio::test]
async fn tls_and_an_acl_user_two_processes_share_state() {
    let mut servers = Servers::new();
    make_certs(servers.dir.path());
    let port = free_port();
    let dir = servers.dir.path().to_path_buf();
    let p = |n: &str| dir.join(n).display().to_string();
    let args: Vec<String> = [
        "--port",
        "0",
        "--tls-port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--tls-cert-file",
        &p("server.crt"),
        "--tls-key-file",
        &p("server.key"),
        "--tls-ca-cert-file",
        &p("ca.crt"),
        "--tls-auth-clients",
        "yes",
        // No anonymous access: only the ACL user, on modelshim's keys.
        "--user",
        "default",
        "off",
        "--user",
        "app",
        "on",
        ">pw-of-the-app-user-48",
        "~modelshim:*",
        "+@all",
    ]
    .map(String::from)
    .to_vec();
    servers.start(port, &args);
    let server = upstream().await;
    let tls = format!(
        "redis_url = \"rediss://app@127.0.0.1:{port}/\"\nredis_password_env = \"MODES_REDIS_PASSWORD\"\n\
         redis_ca_file = \"{}\"\nredis_cert_file = \"{}\"\nredis_key_file = \"{}\"\n",
        p("ca.crt"),
        p("client.crt"),
        p("client.key")
    );
    let env = [("MODES_REDIS_PASSWORD", "pw-of-the-app-user-48"), VERBOSE];
    let a = serve_process(&config(&server.uri(), &tls), &env).await;
    let b = serve_process(&config(&server.uri(), &tls), &env).await;
    let id = first_half(&a.proxy, &b.proxy).await;
    second_half(&a.proxy, &b.proxy, &server, &id).await;
    logs_keep_secret(&[&a, &b], "pw-of-the-app-user-48");
    assert!(a.log().contains(&format!("rediss://app@127.0.0.1:{port}")), "{}", a.log());

    // The server is verified: without the CA (system roots) the store is
    // unavailable (degraded, still serving); with the test-only switch it
    // connects without verification.
    let no_ca = tls.replace(&format!("redis_ca_file = \"{}\"\n", p("ca.crt")), "");
    let c = serve_process(&config(&server.uri(), &no_ca), &env).await;
    assert_eq!(usage(&c.proxy).await["today"]["tokens"], 0, "not verified, not shared");
    let m = c.proxy.http.get(c.proxy.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(m.contains("modelshim_state_backend_up{backend=\"redis\"} 0"), "{m}");
    let insecure = format!("{no_ca}redis_tls_insecure = true\n");
    let d = serve_process(&config(&server.uri(), &insecure), &env).await;
    assert_eq!(usage(&d.proxy).await["today"]["tokens"], 60, "the insecure switch connects");
    assert!(d.log().contains("NOT verified"), "{}", d.log());
    logs_keep_secret(&[&c, &d], "pw-of-the-app-user-48");
}

/// The node that owns `key`'s slot, and its replica, from CLUSTER NODES.
/// The hash tag of a proxy key's spend counters (`spend::ledger`: a digest
/// of the key name, so no name reaches Redis).
fn spend_tag(name: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(name.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The master serving `key`'s slot and its replica, once the cluster's
/// view lists both (a replica attaches a moment after the cluster forms).
fn owner_and_replica(port: u16, o: &[&str], key: &str) -> (u16, u16) {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        match try_owner_and_replica(port, o, key) {
            Ok(pair) => return pair,
            Err(e) if Instant::now() > until => panic!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn try_owner_and_replica(port: u16, o: &[&str], key: &str) -> Result<(u16, u16), String> {
    let slot: u32 = cli(port, o, &["CLUSTER", "KEYSLOT", key]).trim().parse().unwrap();
    let nodes = cli(port, o, &["CLUSTER", "NODES"]);
    let port_of = |addr: &str| addr.split(['@', ':']).nth(1).unwrap().parse::<u16>().unwrap();
    let master = nodes
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| {
            f[2].contains("master")
                && f[8..].iter().any(|r| {
                    let (lo, hi) = r.split_once('-').unwrap_or((r, r));
                    lo.parse::<u32>().is_ok_and(|lo| lo <= slot) && hi.parse::<u32>().is_ok_and(|hi| slot <= hi)
                })
        })
        .ok_or_else(|| format!("no master for slot {slot}: {nodes}"))?;
    let replica = nodes
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f[3] == master[0])
        .ok_or_else(|| format!("no replica of {}: {nodes}", master[0]))?;
    Ok((port_of(master[1]), port_of(replica[1])))
}

/// A three-master cluster (each with a replica), TLS only, with a password: the spend
/// counters of a key (one script, several keys) share a slot; between the
/// two halves that slot migrates to another master (ASK, then MOVED), whose
/// replica then takes over while the master dies.
#[tokio::test]
async fn a_three_master_cluster_two_processes_share_state_across_a_failover() {
    let mut servers = Servers::new();
    make_certs(servers.dir.path());
    let pw = "pw-of-the-cluster-48";
    let ca = servers.path("ca.crt").display().to_string();
    let o: &[&str] = &["--tls", "--cacert", &ca, "-a", pw, "--no-auth-warning"];
    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
    for &port in &ports {
        let p = |n: &str| servers.path(n).display().to_string();
        // TLS only: clients, the cluster bus and replication.
        let args: Vec<String> = [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cluster",
            "yes",
            "--tls-replication",
            "yes",
            "--tls-cert-file",
            &p("server.crt"),
            "--tls-key-file",
            &p("server.key"),
            "--tls-ca-cert-file",
            &p("ca.crt"),
            "--tls-auth-clients",
            "no",
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--cluster-enabled",
            "yes",
            // The bus port defaults to port + 10000, out of range for high ports.
            "--cluster-port",
            &free_port().to_string(),
            "--cluster-config-file",
            &format!("nodes-{port}.conf"),
            "--cluster-node-timeout",
            "2000",
            "--requirepass",
            pw,
            "--masterauth",
            pw,
        ]
        .map(String::from)
        .to_vec();
        servers.start(port, &args);
    }
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let out = Command::new("timeout")
        .args(["30", "redis-cli"])
        .args(o)
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .output()
        .unwrap();
    assert!(out.status.success(), "cluster create: {}", String::from_utf8_lossy(&out.stdout));
    wait_until(20, "the cluster is ok on every node with every replica in sync", || {
        ports.iter().all(|&p| cli(p, o, &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
            && ports.iter().all(|&p| {
                let info = cli(p, o, &["INFO", "replication"]);
                info.contains("role:master") || info.contains("master_link_status:up")
            })
    });

    let server = upstream().await;
    // Two seed nodes are enough: the rest are discovered.
    let state = format!(
        "redis_cluster = [\"rediss://127.0.0.1:{}\", \"rediss://127.0.0.1:{}\"]\n\
         redis_password_env = \"MODES_CLUSTER_PASSWORD\"\nredis_ca_file = \"{ca}\"\n",
        ports[0], ports[1]
    );
    let env = [("MODES_CLUSTER_PASSWORD", pw), VERBOSE];
    let a = serve_process(&config(&server.uri(), &state), &env).await;
    let b = serve_process(&config(&server.uri(), &state), &env).await;
    let id = first_half(&a.proxy, &b.proxy).await;

    // Alice's slot moves to another master. Mid-migration (keys moved, slot
    // not yet handed over) the old owner answers ASK; after it, MOVED.
    let tag = spend_tag("alice");
    let (owner, _) = owner_and_replica(ports[0], o, &tag);
    let masters: Vec<u16> = ports.iter().copied().filter(|&p| cli(p, o, &["ROLE"]).starts_with("master")).collect();
    let target = *masters.iter().find(|&&p| p != owner).unwrap();
    let slot = cli(owner, o, &["CLUSTER", "KEYSLOT", &tag]).trim().to_string();
    let id_of = |p: u16| cli(p, o, &["CLUSTER", "MYID"]).trim().to_string();
    let (owner_id, target_id) = (id_of(owner), id_of(target));
    assert!(cli(target, o, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &owner_id]).contains("OK"));
    assert!(cli(owner, o, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]).contains("OK"));
    let keys = cli(owner, o, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    // Used and reserved counters of every kind, all under alice's one hash tag.
    let prefix = format!("modelshim:spend:{{{tag}}}:");
    assert!(keys.iter().all(|k| k.starts_with(&prefix)) && keys.len() >= 4, "{keys:?}");
    let target_port = target.to_string();
    let mut migrate = vec!["MIGRATE", "127.0.0.1", &target_port, "", "0", "5000", "AUTH", pw, "KEYS"];
    migrate.extend(keys.iter().copied());
    assert!(cli(owner, o, &migrate).contains("OK"));
    // The counters script, sent to the old owner, is asked over; then moved.
    // (A process that failed to reach them would still show what it saw
    // last: no Redis error may have been counted.)
    let no_errors = |p: &Proxy| {
        let url = p.url("/metrics");
        async move {
            let m = reqwest::get(url).await.unwrap().text().await.unwrap();
            assert!(!m.contains("modelshim_state_errors_total"), "{m}");
        }
    };
    tokens_become(&a.proxy, 30).await;
    no_errors(&a.proxy).await;
    for &p in &masters {
        assert!(cli(p, o, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]).contains("OK"));
    }
    tokens_become(&b.proxy, 30).await;
    no_errors(&b.proxy).await;

    // The master of alice's counters hands over to its replica (a manual
    // failover waits for the replica to catch up), then dies.
    let (master, replica) = owner_and_replica(ports[0], o, &spend_tag("alice"));
    assert_eq!(master, target);
    assert!(cli(replica, o, &["CLUSTER", "FAILOVER"]).contains("OK"));
    wait_until(10, "the replica took over", || cli(replica, o, &["ROLE"]).starts_with("master"));
    servers.kill(master);
    let seed = *ports.iter().find(|p| **p != master).unwrap();
    wait_until(10, "the cluster is ok without the old master", || {
        cli(seed, o, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
    });

    second_half(&a.proxy, &b.proxy, &server, &id).await;
    servers.kill_all();
    serves_degraded(&a.proxy).await;
    logs_keep_secret(&[&a, &b], pw);
}

/// A master, its replica and a sentinel: `SENTINEL FAILOVER` between the two
/// halves, then the old master dies; both processes follow the sentinel to
/// the new master.
#[tokio::test]
async fn sentinel_master_and_replica_two_processes_follow_a_failover() {
    let mut servers = Servers::new();
    let (m, r, s) = (free_port(), free_port(), free_port());
    let base = |port: u16| -> Vec<String> {
        ["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            .map(String::from)
            .to_vec()
    };
    servers.start(m, &base(m));
    let mut replica = base(r);
    replica.extend(["--replicaof", "127.0.0.1", &m.to_string()].map(String::from));
    servers.start(r, &replica);
    wait_until(10, "the replica is in sync", || {
        cli(r, &[], &["INFO", "replication"]).contains("master_link_status:up")
    });
    // A sentinel rewrites its config file: one of its own in the temp dir.
    let conf = servers.path("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {s}\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 {m} 1\n\
             sentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n"
        ),
    )
    .unwrap();
    servers.start(s, &[conf.display().to_string(), "--sentinel".into()]);
    wait_until(20, "the sentinel knows the replica", || {
        cli(s, &[], &["SENTINEL", "REPLICAS", "mymaster"]).contains(&r.to_string())
    });

    let server = upstream().await;
    let state = format!("redis_sentinel = {{ master = \"mymaster\", nodes = [\"redis://127.0.0.1:{s}\"] }}\n");
    let a = serve_process(&config(&server.uri(), &state), &[VERBOSE]).await;
    let b = serve_process(&config(&server.uri(), &state), &[VERBOSE]).await;
    let id = first_half(&a.proxy, &b.proxy).await;

    // Everything written so far is on the replica before it is promoted.
    assert_eq!(cli(m, &[], &["WAIT", "1", "2000"]).trim(), "1");
    let out = cli(s, &[], &["SENTINEL", "FAILOVER", "mymaster"]);
    assert!(out.contains("OK"), "SENTINEL FAILOVER: {out}");
    // Clients learn the new master when the failover is over (SENTINEL
    // MASTERS names it; until then it names the old one).
    wait_until(15, "the sentinel names the replica as master", || {
        let masters = cli(s, &[], &["SENTINEL", "MASTERS"]);
        masters.contains(&format!("port\n{r}\n")) && !masters.contains("failover_in_progress")
    });
    wait_until(10, "the replica is master", || cli(r, &[], &["ROLE"]).starts_with("master"));
    servers.kill(m);

    second_half(&a.proxy, &b.proxy, &server, &id).await;
    // What was written after the failover is on the new master.
    assert!(!cli(r, &[], &["KEYS", "modelshim:spend:*"]).trim().is_empty());
    servers.kill_all();
    serves_degraded(&b.proxy).await;
}
