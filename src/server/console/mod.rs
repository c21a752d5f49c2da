//! The console's HTTP side (docs/console.md): the pages at `/console` and
//! `/console/requests/{id}` (assets embedded, plain HTML/CSS/JS), their JSON
//! (`/console/api/…`) and the live stream (`/console/events`, SSE). The
//! recorder is `crate::recorder`.
//!
//! Access: off unless `[console] enabled`; every route but the login page
//! and the static assets wants the admin key (`[console] admin_key_env`),
//! as `Authorization: Bearer` or the session cookie the login form sets. The
//! proxy keys are not accepted here, nor is the admin key by the proxy.
//!
//! Sessions are random tokens kept here: logout revokes one, each expires
//! after `session_ttl_secs`. `SameSite=Strict` does not separate ports of
//! one host, so every route that changes something (login, logout, skills
//! reload) also wants a same-origin request (`Origin`, `Sec-Fetch-Site`)
//! and, with a session cookie, the session's CSRF token (the page carries
//! it; the script sends it as `x-csrf-token`, forms as `csrf`). Repeated
//! failed logins lock the login out for a while, longer each time.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::Shared;
use crate::config::console::ConsoleConfig;
use crate::recorder::Console;

const COOKIE: &str = "modelshim_console";
const PAGE: &str = include_str!("assets/index.html");
const LOGIN: &str = include_str!("assets/login.html");
const CSS: &str = include_str!("assets/app.css");
const JS: &str = include_str!("assets/app.js");
/// A keep-alive comment on a quiet live stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// At most this many live sessions; a new login ends the oldest beyond it.
const MAX_SESSIONS: usize = 64;
/// Failed logins in a row before the login is locked.
const FREE_FAILURES: u32 = 5;
/// The longest lock after failed logins.
const MAX_LOCK: Duration = Duration::from_secs(300);

/// One login.
struct Session {
    expires: Instant,
    /// What a state-changing request of this session must carry.
    csrf: String,
}

/// Failed logins in a row, and until when the login is locked.
#[derive(Default)]
struct Throttle {
    failures: u32,
    until: Option<Instant>,
}

/// The console of a server: its recorder and how an admin is told.
pub struct Site {
    pub recorder: Arc<Console>,
    /// The admin key's digest (none: the variable is not set, and every
    /// console request is refused).
    admin: Option<[u8; 32]>,
    /// Live sessions by the digest of their cookie (random, so the cookie is
    /// not the key; dies with the process, or at logout, or at expiry).
    sessions: Mutex<HashMap<[u8; 32], Session>>,
    session_ttl: Duration,
    throttle: Mutex<Throttle>,
    admin_key_env: String,
    started: Instant,
}

fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Site {
    /// The console when `[console] enabled`; the admin key joins `secrets`
    /// (redacted wherever text leaves the process).
    pub fn new(cfg: &ConsoleConfig, secrets: &mut Vec<String>) -> Option<Site> {
        if !cfg.enabled {
            return None;
        }
        let key = std::env::var(&cfg.admin_key_env).ok().filter(|k| !k.trim().is_empty());
        if key.is_none() {
            tracing::warn!(env = %cfg.admin_key_env, "[console] is enabled but the admin key variable is not set: every console request is refused");
        }
        if let Some(k) = &key {
            secrets.push(k.clone());
        }
        let recorder = Console::new(cfg, secrets);
        Some(Site {
            recorder,
            admin: key.map(|k| digest(&[k.as_bytes()])),
            sessions: Mutex::new(HashMap::new()),
            session_ttl: Duration::from_secs(cfg.session_ttl_secs.clamp(1, 366 * 86_400)),
            throttle: Mutex::new(Throttle::default()),
            admin_key_env: cfg.admin_key_env.clone(),
            started: Instant::now(),
        })
    }

    /// A new session: its cookie value and CSRF token.
    fn open_session(&self) -> String {
        let (token, csrf) = (random_hex(), random_hex());
        let now = Instant::now();
        if let Ok(mut all) = self.sessions.lock() {
            all.retain(|_, s| s.expires > now);
            while all.len() >= MAX_SESSIONS {
                let Some(oldest) = all.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| *k) else { break };
                all.remove(&oldest);
            }
            all.insert(digest(&[token.as_bytes()]), Session { expires: now + self.session_ttl, csrf });
        }
        token
    }

    /// The cookie's session, when it is live: its digest and CSRF token.
    fn session(&self, h: &HeaderMap) -> Option<([u8; 32], String)> {
        let now = Instant::now();
        let all = self.sessions.lock().ok()?;
        cookies(h).find_map(|c| {
            let d = digest(&[c.as_bytes()]);
            all.get(&d).filter(|s| s.expires > now).map(|s| (d, s.csrf.clone()))
        })
    }

    /// Ends the cookie's session.
    fn close_session(&self, d: &[u8; 32]) {
        if let Ok(mut all) = self.sessions.lock() {
            all.remove(d);
        }
    }

    /// How long the login is locked for, if it is.
    fn locked(&self) -> Option<Duration> {
        let t = self.throttle.lock().ok()?;
        t.until.and_then(|u| u.checked_duration_since(Instant::now())).filter(|d| !d.is_zero())
    }

    /// Counts a login: a failure past [`FREE_FAILURES`] locks the login for
    /// twice as long as the previous lock, up to [`MAX_LOCK`].
    fn login_result(&self, ok: bool) {
        let Ok(mut t) = self.throttle.lock() else { return };
        if ok {
            *t = Throttle::default();
            return;
        }
        t.failures = t.failures.saturating_add(1);
        if t.failures >= FREE_FAILURES {
            let lock = Duration::from_secs(1u64 << (t.failures - FREE_FAILURES).min(16)).min(MAX_LOCK);
            t.until = Some(Instant::now() + lock);
            tracing::warn!(
                failures = t.failures,
                lock_secs = lock.as_secs(),
                "console: failed admin logins; login locked"
            );
        }
    }

    /// Whether `key` is the admin key (compared in constant time).
    fn is_admin_key(&self, key: &[u8]) -> bool {
        self.admin.is_some_and(|a| bool::from(a.ct_eq(&digest(&[key]))))
    }

    /// Whether the request carries the admin key or a session cookie.
    fn admitted(&self, h: &HeaderMap) -> bool {
        if self.admin.is_none() {
            return false;
        }
        let bearer = h
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
        if let Some(k) = bearer {
            return self.is_admin_key(k.trim().as_bytes());
        }
        self.session(h).is_some()
    }

    /// Whether a request may change something: the admin key as a bearer
    /// (no ambient credential a page could borrow), or a live session whose
    /// CSRF token it carries (`x-csrf-token`, or the form's `csrf`); and in
    /// both cases sent by a page of this origin, if by a page at all.
    fn may_change(&self, h: &HeaderMap, form: Option<&[u8]>) -> Result<(), Refused> {
        if !same_origin(h) {
            return Err(Refused::CrossSite);
        }
        if h.contains_key(header::AUTHORIZATION) {
            return if self.admitted(h) { Ok(()) } else { Err(Refused::Unauthorized) };
        }
        let Some((_, want)) = self.session(h) else { return Err(Refused::Unauthorized) };
        let sent = h
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| form.and_then(|b| form_value(b, "csrf")));
        match sent {
            Some(t) if bool::from(t.as_bytes().ct_eq(want.as_bytes())) => Ok(()),
            _ => Err(Refused::CrossSite),
        }
    }
}

/// The console cookie's values in the request.
fn cookies(h: &HeaderMap) -> impl Iterator<Item = &str> {
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(COOKIE).and_then(|c| c.strip_prefix('=')))
}

/// 32 random bytes from the OS, as hex.
fn random_hex() -> String {
    use chacha20poly1305::aead::rand_core::RngCore;
    let mut b = [0u8; 32];
    chacha20poly1305::aead::OsRng.fill_bytes(&mut b);
    hex(&b)
}

/// Whether a request is not a page's of another origin: `Sec-Fetch-Site`,
/// when sent, is `same-origin` (or `none`: typed by the user), and `Origin`,
/// when sent, is this server's own (`http(s)://` and the request's `Host`).
/// Ports count: a page on another port of 127.0.0.1 is another origin.
fn same_origin(h: &HeaderMap) -> bool {
    if let Some(site) = h.get("sec-fetch-site")
        && !matches!(site.as_bytes(), b"same-origin" | b"none")
    {
        return false;
    }
    let Some(origin) = h.get(header::ORIGIN) else { return true };
    let (Ok(origin), Some(Ok(host))) = (origin.to_str(), h.get(header::HOST).map(|v| v.to_str())) else {
        return false;
    };
    let origin = origin.to_ascii_lowercase();
    let host = host.to_ascii_lowercase();
    origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) == Some(host.as_str())
}

/// A path the console serves (the edge leaves it to the console's own key).
pub fn is_console(path: &str) -> bool {
    path == "/console" || path.starts_with("/console/")
}

/// The console is served on loopback only, unless `allow_remote`.
pub fn check_bind(addr: &std::net::SocketAddr, cfg: &ConsoleConfig) -> Result<(), String> {
    if !cfg.enabled || cfg.allow_remote || addr.ip().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "[console] is enabled and the listener {addr} is not loopback: set [console] allow_remote = true to serve the console there (it wants the admin key either way), or listen on 127.0.0.1"
    ))
}

/// The console's routes (answering 404 while it is off).
pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/console", get(page))
        .route("/console/", get(page))
        .route("/console/requests/{id}", get(page))
        .route("/console/login", post(login))
        .route("/console/logout", post(logout))
        .route("/console/assets/app.css", get(|| async { asset("text/css; charset=utf-8", CSS) }))
        .route("/console/assets/app.js", get(|| async { asset("text/javascript; charset=utf-8", JS) }))
        .route("/console/api/requests", get(list))
        .route("/console/api/requests/{id}", get(detail))
        .route("/console/api/proxy", get(proxy))
        .route("/console/api/skills/reload", post(reload))
        .route("/console/events", get(events))
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found").into_response()
}

fn asset(kind: &'static str, text: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "no-cache")], text).into_response()
}

fn html(status: StatusCode, text: String) -> Response {
    let mut r = (status, text).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'",
        ),
    );
    r
}

/// JSON out, redacted once more on the way.
fn json_out(site: &Site, mut v: Value) -> Response {
    site.recorder.redactor().value(&mut v);
    let mut r = axum::Json(v).into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn login_page(site: &Site, status: StatusCode, message: &str) -> Response {
    let message = if site.admin.is_none() {
        format!(
            "The console is enabled, but no admin key is set: start modelshim with {} in its environment.",
            site.admin_key_env
        )
    } else {
        message.to_string()
    };
    html(status, LOGIN.replace("{{message}}", &escape(&message)))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The app (the list, or one request: the script reads the address).
async fn page(State(s): State<Shared>, h: HeaderMap) -> Response {
    let Some(site) = &s.console else { return not_found() };
    if !site.admitted(&h) {
        return login_page(site, StatusCode::UNAUTHORIZED, "");
    }
    // With the admin key as a bearer there is no session, nor a token.
    let csrf = site.session(&h).map(|(_, t)| t).unwrap_or_default();
    html(StatusCode::OK, PAGE.replace("{{csrf}}", &csrf))
}

/// `key=…` from the login form: the session cookie, and back to the console.
async fn login(State(s): State<Shared>, h: HeaderMap, body: Bytes) -> Response {
    let Some(site) = &s.console else { return not_found() };
    // A page of another origin must not log the browser in (login CSRF).
    if !same_origin(&h) {
        return Refused::CrossSite.into_response();
    }
    if let Some(wait) = site.locked() {
        let mut r = login_page(site, StatusCode::TOO_MANY_REQUESTS, "Too many failed logins: try again later.");
        let secs = wait.as_secs().max(1).to_string();
        if let Ok(v) = HeaderValue::from_str(&secs) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return r;
    }
    let key = form_value(&body, "key").unwrap_or_default();
    let ok = site.is_admin_key(key.as_bytes());
    site.login_result(ok);
    if !ok {
        return login_page(site, StatusCode::UNAUTHORIZED, "That is not the admin key.");
    }
    let next = form_value(&body, "next")
        .filter(|n| n.starts_with("/console") && !n.contains("//") && n.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| "/console".into());
    let cookie = format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/console; Max-Age={}",
        site.open_session(),
        site.session_ttl.as_secs()
    );
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let (Ok(c), Ok(l)) = (HeaderValue::from_str(&cookie), HeaderValue::from_str(&next)) {
        r.headers_mut().insert(header::SET_COOKIE, c);
        r.headers_mut().insert(header::LOCATION, l);
    }
    r
}

async fn logout(State(s): State<Shared>, h: HeaderMap, body: Bytes) -> Response {
    let Some(site) = &s.console else { return not_found() };
    if let Err(r) = site.may_change(&h, Some(&body)) {
        return r.into_response();
    }
    if let Some((d, _)) = site.session(&h) {
        site.close_session(&d);
    }
    let cookie = format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/console; Max-Age=0");
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(c) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, c);
    }
    r.headers_mut().insert(header::LOCATION, HeaderValue::from_static("/console"));
    r
}

/// One field of an `application/x-www-form-urlencoded` body.
fn form_value(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    text.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k) == name).then(|| decode(v))
    })
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(x) => {
                        out.push(x);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            x => out.push(x),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why a console API request is refused.
enum Refused {
    Off,
    Unauthorized,
    /// A change not sent by the console's own page (another origin, no
    /// CSRF token).
    CrossSite,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::Off => not_found(),
            Refused::Unauthorized => {
                let e = json!({"error": {"message": "The console wants the admin key.", "type": "invalid_request_error", "code": "console_unauthorized"}});
                (StatusCode::UNAUTHORIZED, axum::Json(e)).into_response()
            }
            Refused::CrossSite => {
                let e = json!({"error": {"message": "The console changes things only for its own page: same origin and the session's CSRF token.", "type": "invalid_request_error", "code": "console_csrf"}});
                (StatusCode::FORBIDDEN, axum::Json(e)).into_response()
            }
        }
    }
}

/// The site when the request may see it.
fn admit<'a>(s: &'a Shared, h: &HeaderMap) -> Result<&'a Site, Refused> {
    let Some(site) = &s.console else { return Err(Refused::Off) };
    if !site.admitted(h) {
        return Err(Refused::Unauthorized);
    }
    Ok(site)
}

async fn list(State(s): State<Shared>, h: HeaderMap) -> Response {
    let site = match admit(&s, &h) {
        Ok(x) => x,
        Err(r) => return r.into_response(),
    };
    json_out(site, json!({"requests": site.recorder.list(), "replica": replica(site)}))
}

async fn detail(State(s): State<Shared>, h: HeaderMap, Path(id): Path<String>) -> Response {
    let site = match admit(&s, &h) {
        Ok(x) => x,
        Err(r) => return r.into_response(),
    };
    match site.recorder.get(&id) {
        Some(v) => json_out(site, v),
        None => {
            let e = json!({"error": {"message": format!("No request {id} in this replica's console (it keeps the last requests while a console is open)."), "code": "not_found"}});
            let mut v = e;
            site.recorder.redactor().value(&mut v);
            (StatusCode::NOT_FOUND, axum::Json(v)).into_response()
        }
    }
}

/// Who this replica is, for the header ("per-replica view").
fn replica(site: &Site) -> Value {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_string()))
        .unwrap_or_default();
    json!({
        "host": host,
        "pid": std::process::id(),
        "uptime_s": site.started.elapsed().as_secs(),
        "version": env!("CARGO_PKG_VERSION"),
        "watchers": site.recorder.watchers(),
        "recording": site.recorder.recording(),
        "kept": site.recorder.len(),
    })
}

/// Per provider from the process's metrics: requests, errors, mean latency.
#[derive(Default)]
struct Totals {
    requests: f64,
    errors: f64,
    seconds: f64,
    timed: f64,
}

fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let end = line[start..].find('"')? + start;
    Some(&line[start..end])
}

fn totals() -> std::collections::BTreeMap<String, Totals> {
    let mut out: std::collections::BTreeMap<String, Totals> = Default::default();
    let (requests, sum, count) = (
        format!("{}{{", crate::metrics::REQUESTS),
        format!("{}_sum{{", crate::metrics::DURATION),
        format!("{}_count{{", crate::metrics::DURATION),
    );
    for line in crate::metrics::render().lines() {
        let Some(p) = label(line, "provider") else { continue };
        let Some(n) = line.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()) else { continue };
        let t = out.entry(p.to_string()).or_default();
        if line.starts_with(&requests) {
            t.requests += n;
            if label(line, "status").is_some_and(|s| s != "200") {
                t.errors += n;
            }
        } else if line.starts_with(&sum) {
            t.seconds += n;
        } else if line.starts_with(&count) {
            t.timed += n;
        }
    }
    out
}

async fn proxy(State(s): State<Shared>, h: HeaderMap) -> Response {
    let site = match admit(&s, &h) {
        Ok(x) => x,
        Err(r) => return r.into_response(),
    };
    let totals = totals();
    let cache = crate::metrics::cache_hits();
    let providers: Vec<Value> = s
        .providers
        .iter()
        .map(|p| {
            let (circuit, failures) = p.breaker.view();
            let t = totals.get(&p.name);
            let (requests, errors) = t.map_or((0.0, 0.0), |t| (t.requests, t.errors));
            let latency = t.filter(|t| t.timed > 0.0).map(|t| (t.seconds / t.timed * 1000.0).round());
            json!({"name": p.name, "base_url": p.base_url, "circuit": circuit, "failures": failures,
                   "requests": requests, "errors": errors,
                   "error_rate": if requests > 0.0 { errors / requests } else { 0.0 },
                   "mean_latency_ms": latency,
                   // By position only: a key's value never leaves the process.
                   "keys": p.keys.view()})
        })
        .collect();
    let tools = s.core.tools.as_ref();
    let mcp: Vec<Value> = tools
        .map(|t| {
            t.mcp()
                .servers()
                .iter()
                .map(|srv| {
                    let (health, error) = srv.health();
                    json!({"name": srv.name, "target": srv.target(), "health": health, "error": error, "tools": srv.tool_names()})
                })
                .collect()
        })
        .unwrap_or_default();
    let skills = tools.and_then(|t| t.skills()).map(|sk| {
        let set = sk.current();
        let list: Vec<Value> = set
            .reports()
            .iter()
            .map(|r| {
                let (status, why) = match &r.status {
                    crate::skills::Status::Ok => ("ok", None),
                    crate::skills::Status::Invalid(w) => ("invalid", Some(w.clone())),
                    crate::skills::Status::Overridden(p) => ("overridden", Some(format!("by {}", p.display()))),
                };
                let description = set.get(&r.name).map(|k| k.description.clone());
                json!({"name": r.name, "path": r.path.display().to_string(), "status": status, "why": why,
                       "warnings": r.warnings, "description": description})
            })
            .collect();
        json!({"generation": set.generation, "loaded": set.len(), "invalid": set.invalid(), "skills": list})
    });
    let server_tools: Vec<Value> = tools
        .map(|t| {
            t.catalog().entries().map(|e| json!({"name": e.spec.name, "description": e.spec.description})).collect()
        })
        .unwrap_or_default();
    let errors: Vec<Value> = site.recorder.list().into_iter().filter(|r| !r["error"].is_null()).take(50).collect();
    json_out(
        site,
        json!({"replica": replica(site), "providers": providers, "mcp": mcp, "skills": skills,
               "server_tools": server_tools, "errors": errors, "cache": cache}),
    )
}

async fn reload(State(s): State<Shared>, h: HeaderMap) -> Response {
    let site = match admit(&s, &h) {
        Ok(x) => x,
        Err(r) => return r.into_response(),
    };
    if let Err(r) = site.may_change(&h, None) {
        return r.into_response();
    }
    let Some(skills) = s.core.tools.as_ref().and_then(|t| t.skills()).cloned() else {
        return json_out(site, json!({"reloaded": false, "message": "Skills are not enabled."}));
    };
    let done = tokio::task::spawn_blocking(move || {
        skills.reload();
        skills.current().generation
    })
    .await;
    match done {
        Ok(generation) => json_out(site, json!({"reloaded": true, "generation": generation})),
        Err(_) => json_out(site, json!({"reloaded": false, "message": "The reload failed."})),
    }
}

/// The live stream: every change of a recorded request, as it happens.
/// While it is open, requests are recorded.
async fn events(State(s): State<Shared>, h: HeaderMap) -> Response {
    let site = match admit(&s, &h) {
        Ok(x) => x,
        Err(r) => return r.into_response(),
    };
    let watch = site.recorder.watch();
    let mut rx = site.recorder.subscribe();
    let cut = s.edge.cut.clone();
    let hello = json!({"type": "hello", "replica": replica(site)});
    let stream = async_stream::stream! {
        let _watch = watch;
        yield Ok::<Bytes, Infallible>(Bytes::from(format!("retry: 2000\ndata: {hello}\n\n")));
        loop {
            tokio::select! {
                _ = cut.cancelled() => break,
                r = tokio::time::timeout(KEEP_ALIVE, rx.recv()) => match r {
                    Err(_) => yield Ok(Bytes::from_static(b": keep-alive\n\n")),
                    Ok(Ok(msg)) => yield Ok(Bytes::from(format!("data: {msg}\n\n"))),
                    Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {
                        yield Ok(Bytes::from_static(b"data: {\"type\":\"lagged\"}\n\n"));
                    }
                    Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => break,
                },
            }
        }
    };
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_decoded() {
        assert_eq!(form_value(b"key=a%2Bb+c&next=%2Fconsole", "key").as_deref(), Some("a+b c"));
        assert_eq!(form_value(b"key=a%2Bb+c&next=%2Fconsole", "next").as_deref(), Some("/console"));
        assert_eq!(form_value(b"key=%zz%4", "key").as_deref(), Some("%zz%4"));
        assert_eq!(form_value(b"x=1", "key"), None);
    }

    #[test]
    fn the_console_binds_loopback_unless_told() {
        let on = ConsoleConfig { enabled: true, ..Default::default() };
        assert!(check_bind(&"127.0.0.1:1".parse().unwrap(), &on).is_ok());
        assert!(check_bind(&"0.0.0.0:1".parse().unwrap(), &on).unwrap_err().contains("allow_remote"));
        let remote = ConsoleConfig { allow_remote: true, ..on };
        assert!(check_bind(&"0.0.0.0:1".parse().unwrap(), &remote).is_ok());
    }
}
