//! How the Redis store reaches Redis, in the three forms production runs:
//! one server (plain or TLS, any ACL user), a Redis Cluster, or the master
//! Sentinel names. [`Conn`] is one `ConnectionLike` for all of them, so the
//! store's commands and scripts are written once and the rest of the code
//! does not know which form it talks to.
//!
//! TLS is rustls with the process's ring provider (installed at startup),
//! never OpenSSL or aws-lc. Passwords come from the URL or, better, from
//! `[state] redis_password_env`; they reach only Redis (see [`secrets`]).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline,
    RedisError, RedisFuture, RedisResult, TlsCertificates, TlsMode, Value,
};

use super::StateError;
use crate::config::state::{SentinelConfig, StateConfig};

/// The TLS settings of `[state]`, the same for every form.
struct Tls {
    /// CA and client certificate, when configured.
    certs: Option<TlsCertificates>,
    /// `redis_tls_insecure`: no verification of the server (test setups).
    insecure: bool,
}

/// The store's connection: commands and scripts run on it alike.
#[derive(Clone)]
pub(super) enum Conn {
    /// One server: the crate's manager, reconnecting by itself.
    Single(ConnectionManager),
    /// A cluster or a sentinel's master: connected on first use, and again
    /// after a failure that says the link is gone or points at a replica.
    Lazy(Arc<Lazy>),
}

#[derive(Clone)]
enum Link {
    /// Follows MOVED/ASK and refreshes its slot map by itself.
    Cluster(ClusterConnection),
    /// The master the sentinels named when it was made.
    Node(MultiplexedConnection),
}

/// A link made on first use. The lock is held while connecting, so
/// concurrent commands wait for one connect (each within its own bound)
/// rather than each making its own.
pub(super) struct Lazy {
    state: tokio::sync::Mutex<LazyState>,
    /// Connection and response timeout of a sentinel's master link.
    timeout: Duration,
}

struct LazyState {
    target: Target,
    /// Counts links made, so a late failure does not drop a newer link.
    generation: u64,
    link: Option<Link>,
}

enum Target {
    Cluster(Box<redis::cluster::ClusterClient>),
    Sentinel(Box<SentinelClient>),
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Unavailable(format!("{what}: {e}"))
}

/// The password in `[state] redis_password_env`, if named.
fn env_password(var: Option<&str>) -> Result<Option<String>, StateError> {
    let Some(var) = var else { return Ok(None) };
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(Some(v)),
        _ => Err(StateError::Unavailable(format!("the Redis password variable {var} is not set"))),
    }
}

/// The Redis passwords of `config` (in URLs and the named variables), for
/// the redactor: they must never reach a log line or an error body.
pub fn secrets(config: &StateConfig) -> Vec<String> {
    let mut urls: Vec<&str> = config.redis_url.iter().map(String::as_str).collect();
    urls.extend(config.redis_cluster.iter().map(String::as_str));
    if let Some(s) = &config.redis_sentinel {
        urls.extend(s.nodes.iter().map(String::as_str));
    }
    let mut out: Vec<String> = urls
        .into_iter()
        .filter_map(|u| u.into_connection_info().ok())
        .filter_map(|i| i.redis_settings().password().map(str::to_string))
        .collect();
    let vars =
        [config.redis_password_env.as_deref(), config.redis_sentinel.as_ref().and_then(|s| s.password_env.as_deref())];
    out.extend(vars.into_iter().flatten().filter_map(|v| std::env::var(v).ok()).filter(|v| !v.is_empty()));
    out
}

impl Tls {
    fn load(config: &StateConfig) -> Result<Self, StateError> {
        let read = |key: &str, p: &std::path::Path| {
            std::fs::read(p).map_err(|e| StateError::Unavailable(format!("[state] {key} {}: {e}", p.display())))
        };
        let root_cert = config.redis_ca_file.as_deref().map(|p| read("redis_ca_file", p)).transpose()?;
        let client_tls = match (&config.redis_cert_file, &config.redis_key_file) {
            (Some(c), Some(k)) => Some(ClientTlsConfig {
                client_cert: read("redis_cert_file", c)?,
                client_key: read("redis_key_file", k)?,
            }),
            (None, None) => None,
            _ => {
                return Err(StateError::Unavailable(
                    "[state] redis_cert_file and redis_key_file go together (a client certificate and its key)".into(),
                ));
            }
        };
        let certs = (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates { client_tls, root_cert });
        Ok(Tls { certs, insecure: config.redis_tls_insecure })
    }

    fn configured(&self) -> bool {
        self.certs.is_some() || self.insecure
    }
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// `url` parsed, with the password of `password_env` when set.
fn node(url: &str, password: Option<&str>) -> Result<ConnectionInfo, StateError> {
    let info = url.into_connection_info().map_err(|e| unavailable("redis url", e))?;
    Ok(match password {
        Some(p) => {
            let settings = info.redis_settings().clone().set_password(p);
            info.set_redis_settings(settings)
        }
        None => info,
    })
}

/// Errors after which a sentinel's link is made again: the connection is
/// gone or hung, or the node is a replica now (a failover happened).
fn link_lost(e: &RedisError) -> bool {
    e.is_connection_dropped()
        || e.is_io_error()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

impl Conn {
    /// The connection `config` describes (one of `redis_url`,
    /// `redis_cluster`, `redis_sentinel`). Nothing is connected yet: a Redis
    /// that is down at startup does not stop the server.
    pub(super) fn new(config: &StateConfig, timeout: Duration) -> Result<(Self, String), StateError> {
        let forms = [config.redis_url.is_some(), !config.redis_cluster.is_empty(), config.redis_sentinel.is_some()];
        if forms.iter().filter(|f| **f).count() != 1 {
            return Err(StateError::Unavailable(
                "[state]: set one of redis_url, redis_cluster and redis_sentinel".into(),
            ));
        }
        let tls = Tls::load(config)?;
        let password = env_password(config.redis_password_env.as_deref())?;
        if let Some(url) = &config.redis_url {
            return Self::single(url, password.as_deref(), &tls, timeout);
        }
        if let Some(s) = &config.redis_sentinel {
            return Self::sentinel(s, password.as_deref(), &tls, timeout);
        }
        Self::cluster(&config.redis_cluster, password.as_deref(), &tls, timeout)
    }

    fn single(url: &str, password: Option<&str>, tls: &Tls, timeout: Duration) -> Result<(Self, String), StateError> {
        let mut info = node(url, password)?;
        if tls.configured() && !is_tls(&info) {
            return Err(StateError::Unavailable(
                "[state] redis_ca_file, redis_cert_file, redis_key_file and redis_tls_insecure need a rediss:// URL"
                    .into(),
            ));
        }
        if tls.insecure
            && let ConnectionAddr::TcpTls { host, port, .. } = info.addr().clone()
        {
            // The crate's "no verification" mode (its `#insecure` URL form).
            info = info.set_addr(ConnectionAddr::TcpTls { host, port, insecure: true, tls_params: None });
        }
        let described = describe(&info);
        let client = match &tls.certs {
            Some(certs) => Client::build_with_tls(info, certs.clone()),
            None => Client::open(info),
        }
        .map_err(|e| unavailable("redis", e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(|e| unavailable("redis", e))?;
        Ok((Conn::Single(conn), described))
    }

    fn cluster(
        urls: &[String],
        password: Option<&str>,
        tls: &Tls,
        timeout: Duration,
    ) -> Result<(Self, String), StateError> {
        let nodes = urls.iter().map(|u| node(u, password)).collect::<Result<Vec<_>, _>>()?;
        let secure = nodes.iter().all(is_tls);
        if !secure && (tls.configured() || nodes.iter().any(is_tls)) {
            return Err(StateError::Unavailable(
                "[state] redis_cluster: every node rediss:// (TLS settings need it), or every node redis://".into(),
            ));
        }
        let described = format!(
            "cluster of {} seed node(s), first {}",
            nodes.len(),
            nodes.first().map(describe).unwrap_or_default()
        );
        let mut b = ClusterClientBuilder::new(nodes)
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(3)
            .min_retry_wait(10)
            .max_retry_wait(200);
        if let Some(p) = password {
            b = b.password(p);
        }
        if let Some(certs) = &tls.certs {
            b = b.certs(certs.clone());
        }
        if tls.insecure {
            b = b.tls(TlsMode::Insecure);
        }
        let client = b.build().map_err(|e| unavailable("redis cluster", e))?;
        Ok((Conn::lazy(Target::Cluster(Box::new(client)), timeout), described))
    }

    fn sentinel(
        s: &SentinelConfig,
        password: Option<&str>,
        tls: &Tls,
        timeout: Duration,
    ) -> Result<(Self, String), StateError> {
        let sentinel_password = env_password(s.password_env.as_deref())?;
        let nodes = s.nodes.iter().map(|u| node(u, sentinel_password.as_deref())).collect::<Result<Vec<_>, _>>()?;
        let Some(first) = nodes.first() else {
            return Err(StateError::Unavailable("[state] redis_sentinel: nodes is empty".into()));
        };
        let secure = nodes.iter().all(is_tls);
        if !secure && (tls.configured() || nodes.iter().any(is_tls)) {
            return Err(StateError::Unavailable(
                "[state] redis_sentinel: every node rediss:// (TLS settings need it), or every node redis://".into(),
            ));
        }
        let described = format!("master {:?} of {} sentinel(s), first {}", s.master, nodes.len(), describe(first));
        let sentinel_settings = first.redis_settings().clone();
        let addrs: Vec<ConnectionAddr> = nodes.iter().map(|n| n.addr().clone()).collect();
        let mut b = SentinelClientBuilder::new(addrs, &s.master, SentinelServerType::Master)
            .map_err(|e| unavailable("redis sentinel", e))?
            .set_client_to_sentinel_tcp_settings(first.tcp_settings().clone());
        if let Some(u) = sentinel_settings.username() {
            b = b.set_client_to_sentinel_username(u);
        }
        if let Some(p) = sentinel_settings.password() {
            b = b.set_client_to_sentinel_password(p);
        }
        if let Some(u) = &s.master_username {
            b = b.set_client_to_redis_username(u);
        }
        if let Some(p) = password {
            b = b.set_client_to_redis_password(p);
        }
        if secure {
            let mode = if tls.insecure { TlsMode::Insecure } else { TlsMode::Secure };
            b = b.set_client_to_redis_tls_mode(mode).set_client_to_sentinel_tls_mode(mode);
            if let Some(certs) = &tls.certs {
                b = b
                    .set_client_to_redis_certificates(certs.clone())
                    .set_client_to_sentinel_certificates(certs.clone());
            }
        }
        let client = b.build().map_err(|e| unavailable("redis sentinel", e))?;
        Ok((Conn::lazy(Target::Sentinel(Box::new(client)), timeout), described))
    }

    fn lazy(target: Target, timeout: Duration) -> Self {
        let state = LazyState { target, generation: 0, link: None };
        Conn::Lazy(Arc::new(Lazy { state: tokio::sync::Mutex::new(state), timeout }))
    }
}

/// Where a connection goes, for the startup log: scheme, host and port,
/// the user; never the password.
fn describe(info: &ConnectionInfo) -> String {
    let user = info.redis_settings().username().map(|u| format!("{u}@")).unwrap_or_default();
    let auth = if info.redis_settings().password().is_some() { " (password set)" } else { "" };
    match info.addr() {
        ConnectionAddr::Tcp(h, p) => format!("redis://{user}{h}:{p}{auth}"),
        ConnectionAddr::TcpTls { host, port, insecure, .. } => {
            let v = if *insecure { " (TLS NOT VERIFIED)" } else { "" };
            format!("rediss://{user}{host}:{port}{auth}{v}")
        }
        _ => format!("redis (unix socket){auth}"),
    }
}

impl Lazy {
    /// The current link, made now if there is none.
    async fn link(&self) -> RedisResult<(u64, Link)> {
        let mut s = self.state.lock().await;
        if let Some(l) = &s.link {
            return Ok((s.generation, l.clone()));
        }
        let link = match &mut s.target {
            Target::Cluster(c) => Link::Cluster(c.get_async_connection().await?),
            Target::Sentinel(c) => {
                // Asks the sentinels which node is the master now.
                let master = c.async_get_client().await?;
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout));
                Link::Node(master.get_multiplexed_async_connection_with_config(&config).await?)
            }
        };
        s.generation += 1;
        s.link = Some(link.clone());
        Ok((s.generation, link))
    }

    /// Forgets link `generation` after `e` if `e` says it is no use: the
    /// next command makes a new one (for a sentinel: asks for the master).
    async fn failed(&self, generation: u64, e: &RedisError) {
        let mut s = self.state.lock().await;
        let gone = match s.target {
            // The cluster connection reconnects and follows MOVED/ASK itself.
            Target::Cluster(_) => e.is_unrecoverable_error(),
            Target::Sentinel(_) => link_lost(e),
        };
        if gone && s.generation == generation && s.link.is_some() {
            tracing::debug!(error = %e, "redis link dropped; the next command connects again");
            s.link = None;
        }
    }
}

impl Link {
    fn as_conn(&mut self) -> &mut (dyn ConnectionLike + Send) {
        match self {
            Link::Cluster(c) => c,
            Link::Node(c) => c,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Lazy(l) => Box::pin(async move {
                let (generation, mut link) = l.link().await?;
                let r = link.as_conn().req_packed_command(cmd).await;
                if let Err(e) = &r {
                    l.failed(generation, e).await;
                }
                r
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Lazy(l) => Box::pin(async move {
                let (generation, mut link) = l.link().await?;
                let r = link.as_conn().req_packed_commands(pipeline, offset, count).await;
                if let Err(e) = &r {
                    l.failed(generation, e).await;
                }
                r
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Lazy(_) => 0,
        }
    }
}

/// Whether an idempotent command that failed with `e` is worth sending
/// once more (on the reconnected link, or the new master).
pub(super) fn worth_resending(e: &RedisError) -> bool {
    e.is_connection_dropped()
        || e.is_io_error()
        || e.is_unrecoverable_error()
        || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml_text: &str) -> StateConfig {
        toml::from_str(toml_text).unwrap()
    }

    fn refused(toml_text: &str) -> String {
        match Conn::new(&config(toml_text), Duration::from_millis(100)) {
            Err(StateError::Unavailable(e)) => e,
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted: {toml_text}"),
        }
    }

    #[tokio::test]
    async fn misconfigurations_are_refused_at_start_without_the_password() {
        let e = refused("redis_url = \"redis://h:1\"\nredis_cluster = [\"redis://h:2\"]");
        assert!(e.contains("one of redis_url, redis_cluster and redis_sentinel"), "{e}");
        let e = refused("redis_url = \"redis://h:1\"\nredis_tls_insecure = true");
        assert!(e.contains("need a rediss:// URL"), "{e}");
        let e = refused("redis_url = \"rediss://h:1\"\nredis_cert_file = \"/c.pem\"");
        assert!(e.contains("go together"), "{e}");
        let e = refused("redis_cluster = [\"rediss://h:1\", \"redis://h:2\"]");
        assert!(e.contains("every node rediss://"), "{e}");
        let e = refused("redis_sentinel = { master = \"m\", nodes = [] }");
        assert!(e.contains("nodes is empty"), "{e}");
        let e = refused("redis_url = \"rediss://u@h:1\"\nredis_password_env = \"MODELSHIM_TEST_UNSET_REDIS_PW_48\"");
        assert!(e.contains("MODELSHIM_TEST_UNSET_REDIS_PW_48 is not set"), "{e}");
        let e = refused("redis_url = \"rediss://u:hunter2-secret@h:1\"\nredis_ca_file = \"/nonexistent/ca.pem\"");
        assert!(e.contains("redis_ca_file") && !e.contains("hunter2"), "{e}");
    }

    #[tokio::test]
    async fn each_form_is_described_without_its_password() {
        let (_, d) =
            Conn::new(&config("redis_url = \"rediss://app:hunter2-secret@h:6380/\""), Duration::from_millis(100))
                .unwrap();
        assert_eq!(d, "rediss://app@h:6380 (password set)");
        let (_, d) =
            Conn::new(&config("redis_cluster = [\"redis://a:1\", \"redis://b:2\"]"), Duration::from_millis(100))
                .unwrap();
        assert_eq!(d, "cluster of 2 seed node(s), first redis://a:1");
        let s = "redis_sentinel = { master = \"mymaster\", nodes = [\"redis://s:26379\"] }";
        let (_, d) = Conn::new(&config(s), Duration::from_millis(100)).unwrap();
        assert_eq!(d, "master \"mymaster\" of 1 sentinel(s), first redis://s:26379");
        let insecure = "redis_url = \"rediss://h:1\"\nredis_tls_insecure = true";
        let (_, d) = Conn::new(&config(insecure), Duration::from_millis(100)).unwrap();
        assert!(d.ends_with("(TLS NOT VERIFIED)"), "{d}");
        // Passwords of every form go to the redactor.
        let all = config(
            "redis_cluster = [\"redis://:pw-in-a-cluster-url@a:1\"]\n\
             redis_sentinel = { master = \"m\", nodes = [\"redis://u:pw-in-a-sentinel-url@s:1\"] }",
        );
        assert_eq!(secrets(&all), ["pw-in-a-cluster-url", "pw-in-a-sentinel-url"]);
    }
}
