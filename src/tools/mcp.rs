//! MCP servers as tool sources, through the official `rmcp` client: stdio
//! servers run as child processes (`command`/`args`/`env`), Streamable HTTP
//! servers are reached at `url` over our reqwest client.
//!
//! A stdio server gets a scrubbed environment — [`INHERITED_ENV`] from ours
//! (no keys: provider and proxy keys live in our environment) plus its
//! config's `env` — and leads its own process group, which is killed whole
//! when the connection is dropped and at shutdown ([`Manager::shutdown`]).
//!
//! Tools are listed at connect and again on `notifications/tools/list_changed`
//! (each change bumps the generation, so the registry rebuilds its catalog).
//! A call that could not be sent reconnects (restarts the child) and is sent
//! once more; one the server may have received is never sent again (at most
//! once: its result says the server stopped). A supervisor task reconnects
//! servers that are down. Results
//! are converted from the MCP wire shape: text, `structuredContent`,
//! `isError`, images, embedded resources and resource links.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, Peer, RoleClient, ServiceError};
use serde_json::{Map, Value};

use super::config::{Lifecycle, McpServerConfig, secs};
use super::{Content, Tool, ToolError, ToolOutput, ToolSpec, bump};

/// The variables of our environment a stdio server inherits: what programs
/// need to find themselves, their home, their locale, temp files and CA
/// certificates. Anything else (keys above all) must be given in `env`.
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "TMPDIR",
    "TEMP",
    "TMP",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "SYSTEMROOT",
    "APPDATA",
    "LOCALAPPDATA",
    "USERPROFILE",
];

/// [`INHERITED_ENV`] and `LC_*` as they are in our environment.
fn inherited_env() -> impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)> {
    std::env::vars_os().filter(|(k, _)| k.to_str().is_some_and(|k| INHERITED_ENV.contains(&k) || k.starts_with("LC_")))
}

/// How long a failed connect is not retried by a tool call (the supervisor
/// keeps trying in the background).
const RETRY_AFTER: Duration = Duration::from_secs(10);
/// How long a stdio server may take to exit at shutdown before it is killed.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);

/// Every configured MCP server.
pub struct Manager {
    servers: Vec<Arc<Server>>,
    generation: Arc<AtomicU64>,
}

impl Manager {
    pub fn new(configs: &BTreeMap<String, McpServerConfig>, default_timeout: Duration) -> Result<Self, ToolError> {
        let generation = Arc::new(AtomicU64::new(0));
        let mut servers = Vec::new();
        for (name, c) in configs.iter().filter(|(_, c)| c.enabled) {
            match (&c.command, &c.url) {
                (Some(_), None) | (None, Some(_)) => {}
                _ => {
                    return Err(ToolError::Config(format!(
                        "[mcp.servers.{name}] needs exactly one of `command` (stdio) or `url` (Streamable HTTP)"
                    )));
                }
            }
            servers.push(Arc::new(Server {
                name: name.clone(),
                timeout: c.timeout_secs.map_or(default_timeout, secs),
                config: c.clone(),
                conn: tokio::sync::Mutex::new(None),
                shared: Arc::new(Shared { tools: RwLock::new(Vec::new()), generation: generation.clone() }),
                failed: std::sync::Mutex::new(None),
            }));
        }
        Ok(Manager { servers, generation })
    }

    pub fn has_servers(&self) -> bool {
        !self.servers.is_empty()
    }

    pub fn servers(&self) -> &[Arc<Server>] {
        &self.servers
    }

    /// Changes whenever a server's tool list changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Connects every server at once; the number of tools or the error, by server.
    pub async fn connect_all(&self) -> Vec<(String, Result<usize, String>)> {
        let tasks = self.servers.iter().map(|s| async move { (s.name.clone(), s.connect(true).await) });
        futures_util::future::join_all(tasks).await
    }

    /// Ends every stdio server: closes its session (a well-behaved server
    /// exits on end of input), then kills its process group, children too.
    pub async fn shutdown(&self) {
        let each = self.servers.iter().map(|s| async move {
            let conn = s.conn.lock().await.take();
            if let Some(c) = conn {
                let group = c.group;
                let _ = tokio::time::timeout(SHUTDOWN_WAIT, c.service.cancel()).await;
                drop(group);
            }
        });
        futures_util::future::join_all(each).await;
    }

    /// Every server's current tools.
    pub fn tools(&self) -> Vec<McpTool> {
        let mut out = Vec::new();
        for s in &self.servers {
            if let Ok(tools) = s.shared.tools.read() {
                out.extend(tools.iter().map(|t| McpTool { server: s.clone(), tool: t.clone() }));
            }
        }
        out
    }
}

/// Reconnects servers that are down, every few seconds, for as long as the
/// manager lives. Owned by the registry (aborted when it is dropped).
pub async fn supervise(manager: Weak<Manager>) {
    loop {
        tokio::time::sleep(RETRY_AFTER).await;
        let Some(m) = manager.upgrade() else { return };
        for s in &m.servers {
            if !s.is_connected().await
                && let Err(e) = s.connect(false).await
            {
                tracing::debug!(server = %s.name, "MCP server still unavailable: {e}");
            }
        }
    }
}

/// A tool as a server listed it.
#[derive(Debug, Clone)]
struct ListedTool {
    name: String,
    description: String,
    schema: Value,
}

struct Shared {
    tools: RwLock<Vec<ListedTool>>,
    generation: Arc<AtomicU64>,
}

impl Shared {
    fn set_tools(&self, tools: Vec<rmcp::model::Tool>) -> usize {
        let listed: Vec<ListedTool> = tools
            .into_iter()
            .map(|t| {
                let mut schema = Value::Object((*t.input_schema).clone());
                // OpenAI wants an object schema with `properties`.
                if let Some(o) = schema.as_object_mut() {
                    o.entry("type").or_insert_with(|| Value::String("object".into()));
                    o.entry("properties").or_insert_with(|| Value::Object(Map::new()));
                }
                ListedTool {
                    name: t.name.to_string(),
                    description: t.description.map(|d| d.to_string()).or(t.title).unwrap_or_default(),
                    schema,
                }
            })
            .collect();
        let n = listed.len();
        if let Ok(mut g) = self.tools.write() {
            *g = listed;
        }
        bump(&self.generation);
        n
    }
}

/// Our side of an MCP session: refreshes the tool list when the server
/// says it changed.
#[derive(Clone)]
struct Handler {
    server: String,
    shared: Arc<Shared>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        // rmcp runs notification handlers in their own task, so a request
        // from here does not block the session.
        match context.peer.list_all_tools().await {
            Ok(tools) => {
                let n = self.shared.set_tools(tools);
                tracing::info!(server = %self.server, tools = n, "MCP tool list changed");
            }
            Err(e) => tracing::warn!(server = %self.server, "cannot list tools after a change: {e}"),
        }
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("modelshim", env!("CARGO_PKG_VERSION")))
    }
}

/// Aborts a task when dropped (ties a helper task to its owner).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Conn {
    service: RunningService<RoleClient, Handler>,
    /// Forwards the child's stderr to the log.
    _stderr: Option<AbortOnDrop>,
    /// A stdio server's process group, killed when the connection goes.
    group: super::skill_scripts::Group,
}

impl Conn {
    /// Whether a request sent now reaches the server: the service was not
    /// closed, and its loop has not ended on the server going away (which
    /// `is_closed` alone does not tell, so a call after a crash was sent
    /// into a dead session).
    fn live(&self) -> bool {
        !self.service.is_closed() && !self.service.peer().is_transport_closed()
    }
}

/// One MCP server and its connection.
pub struct Server {
    pub name: String,
    config: McpServerConfig,
    timeout: Duration,
    conn: tokio::sync::Mutex<Option<Conn>>,
    shared: Arc<Shared>,
    /// When and why the last connect failed.
    failed: std::sync::Mutex<Option<(Instant, String)>>,
}

impl Server {
    /// `command args…` or the URL, for messages.
    /// What the server is, for the console: the command without its
    /// arguments (they often carry a token), or the URL without its user
    /// info and query.
    pub fn target(&self) -> String {
        match (&self.config.command, &self.config.url) {
            (Some(c), _) => match self.config.args.len() {
                0 => c.clone(),
                n => format!("{c} (+{n} argument{} not shown)", if n == 1 { "" } else { "s" }),
            },
            (None, Some(u)) => match reqwest::Url::parse(u) {
                Ok(mut url) => {
                    let _ = url.set_username("");
                    let _ = url.set_password(None);
                    url.set_query(None);
                    url.set_fragment(None);
                    url.to_string()
                }
                Err(_) => "(an unparsable URL)".into(),
            },
            (None, None) => String::new(),
        }
    }

    /// How the connection is, for the console: `up`, `connecting`, `down`
    /// (with the last connect error) or `idle` (not started yet).
    pub fn health(&self) -> (&'static str, Option<String>) {
        let failed = self.failed.lock().ok().and_then(|f| f.as_ref().map(|(_, why)| why.clone()));
        match self.conn.try_lock() {
            Ok(c) if c.as_ref().is_some_and(Conn::live) => ("up", None),
            Ok(_) if failed.is_some() => ("down", failed),
            Ok(_) => ("idle", None),
            Err(_) => ("connecting", failed),
        }
    }

    /// The names of the tools the server listed.
    pub fn tool_names(&self) -> Vec<String> {
        self.shared.tools.read().map(|t| t.iter().map(|t| t.name.clone()).collect()).unwrap_or_default()
    }

    async fn is_connected(&self) -> bool {
        self.conn.lock().await.as_ref().is_some_and(Conn::live)
    }

    /// Connects (or reconnects) and lists tools. Without `force`, a connect
    /// that failed recently is not tried again yet.
    async fn connect(&self, force: bool) -> Result<usize, String> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref()
            && c.live()
        {
            return Ok(self.tool_names().len());
        }
        if !force
            && let Ok(f) = self.failed.lock()
            && let Some((at, why)) = f.as_ref()
            && at.elapsed() < RETRY_AFTER
        {
            return Err(why.clone());
        }
        *guard = None;
        let limit = secs(self.config.startup_timeout_secs);
        let result = match tokio::time::timeout(limit, self.start()).await {
            Err(_) => Err(format!("did not start and list its tools within {limit:?}")),
            Ok(r) => r,
        };
        match result {
            Ok((conn, tools)) => {
                let n = self.shared.set_tools(tools);
                *guard = Some(conn);
                if let Ok(mut f) = self.failed.lock() {
                    *f = None;
                }
                Ok(n)
            }
            Err(e) => {
                let msg = format!("MCP server `{}` ({}): {e}", self.name, self.target());
                if let Ok(mut f) = self.failed.lock() {
                    *f = Some((Instant::now(), msg.clone()));
                }
                Err(msg)
            }
        }
    }

    async fn start(&self) -> Result<(Conn, Vec<rmcp::model::Tool>), String> {
        let handler = Handler { server: self.name.clone(), shared: self.shared.clone() };
        let mut group = super::skill_scripts::Group(None);
        let (service, stderr) = if let Some(cmd) = &self.config.command {
            let mut c = tokio::process::Command::new(cmd);
            c.args(&self.config.args).env_clear().envs(inherited_env()).envs(&self.config.env);
            if let Some(dir) = &self.config.cwd {
                c.current_dir(dir);
            }
            let mut c = process_wrap::tokio::CommandWrap::from(c);
            #[cfg(unix)]
            c.wrap(process_wrap::tokio::ProcessGroup::leader());
            let (transport, err) = TokioChildProcess::builder(c)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start `{cmd}`: {e}"))?;
            group = super::skill_scripts::Group(transport.id());
            let stderr = err.map(|e| {
                let name = self.name.clone();
                AbortOnDrop(tokio::spawn(async move {
                    use tokio::io::AsyncBufReadExt;
                    let mut lines = tokio::io::BufReader::new(e).lines();
                    while let Ok(Some(l)) = lines.next_line().await {
                        tracing::debug!(server = %name, "mcp stderr: {l}");
                    }
                }))
            });
            (start_session(handler, transport, self.config.lifecycle).await?, stderr)
        } else {
            let url = self.config.url.clone().unwrap_or_default();
            let mut headers = reqwest::header::HeaderMap::new();
            for (k, v) in &self.config.headers {
                let name =
                    reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header {k}: {e}"))?;
                let value = reqwest::header::HeaderValue::from_str(v).map_err(|e| format!("header {k}: {e}"))?;
                headers.insert(name, value);
            }
            let client = reqwest::Client::builder().default_headers(headers).build().map_err(|e| e.to_string())?;
            let transport = StreamableHttpClientTransport::with_client(
                super::mcp_session::SessionClient(client),
                StreamableHttpClientTransportConfig::with_uri(url),
            );
            (start_session(handler, transport, self.config.lifecycle).await?, None)
        };
        let tools = service.list_all_tools().await.map_err(|e| format!("tools/list failed: {e}"))?;
        Ok((Conn { service, _stderr: stderr, group }, tools))
    }

    /// A live session's peer, connecting first when needed.
    async fn peer(&self, reconnect: bool) -> Result<Peer<RoleClient>, ToolError> {
        if reconnect {
            *self.conn.lock().await = None;
        }
        {
            let g = self.conn.lock().await;
            if let Some(c) = g.as_ref()
                && c.live()
            {
                return Ok(c.service.peer().clone());
            }
        }
        self.connect(reconnect).await.map_err(ToolError::Unavailable)?;
        let g = self.conn.lock().await;
        g.as_ref()
            .map(|c| c.service.peer().clone())
            .ok_or_else(|| ToolError::Unavailable(format!("MCP server `{}` is not connected", self.name)))
    }

    /// Calls a tool; a transport failure reconnects and retries once.
    async fn call(&self, tool: &str, args: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let mut reconnect = false;
        loop {
            let peer = self.peer(reconnect).await?;
            let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args.clone());
            match peer.call_tool(params).await {
                Ok(r) => {
                    let v = serde_json::to_value(&r).map_err(|e| ToolError::Failed(e.to_string()))?;
                    return Ok(convert_result(&v));
                }
                // A protocol error (unknown tool, bad params) is for the model to read.
                Err(ServiceError::McpError(e)) => return Ok(ToolOutput::error(e.message.to_string())),
                // Not sent: safe to send on a new connection.
                Err(e @ ServiceError::TransportSend(_)) if !reconnect => {
                    tracing::warn!(server = %self.name, "MCP call could not be sent, reconnecting: {e}");
                    reconnect = true;
                }
                // Sent, then the server went away: it may have run the call,
                // so it is not sent again (at most once); the model decides.
                // The next call reconnects.
                Err(ServiceError::TransportClosed) => {
                    tracing::warn!(server = %self.name, tool, "MCP server closed its connection during a call");
                    *self.conn.lock().await = None;
                    return Ok(ToolOutput::error(format!(
                        "The MCP server `{}` stopped during this call (it may have crashed). The call may or may not have taken effect; it was not sent again.",
                        self.name
                    )));
                }
                Err(e) => return Err(ToolError::Failed(format!("MCP server `{}`: {e}", self.name))),
            }
        }
    }
}

/// Starts a session in the configured lifecycle (rmcp's; `initialize`
/// unless the config asks for 2026-07-28's `server/discover`).
async fn start_session<T, E, A>(
    handler: Handler,
    transport: T,
    lifecycle: Lifecycle,
) -> Result<RunningService<RoleClient, Handler>, String>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let latest = || vec![rmcp::model::ProtocolVersion::V_2026_07_28];
    let mode = match lifecycle {
        Lifecycle::Initialize => ClientLifecycleMode::Initialize,
        Lifecycle::Discover => ClientLifecycleMode::Discover { preferred_versions: latest() },
        Lifecycle::Auto => ClientLifecycleMode::Auto { preferred_versions: latest(), legacy_version: None },
    };
    handler
        .serve_with_lifecycle(transport, mode)
        .await
        .map_err(|e| format!("session start ({lifecycle:?}) failed: {e}"))
}

/// One MCP tool as a [`Tool`].
#[derive(Clone)]
pub struct McpTool {
    server: Arc<Server>,
    tool: ListedTool,
}

impl McpTool {
    pub fn server_name(&self) -> &str {
        &self.server.name
    }
    pub fn exposed(&self) -> bool {
        self.server.config.expose
    }
    pub fn timeout(&self) -> Duration {
        self.server.timeout
    }
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.tool.name.clone(),
            description: self.tool.description.clone(),
            parameters: self.tool.schema.clone(),
        }
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        let args = match args {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        Box::pin(self.server.call(&self.tool.name, args))
    }
}

/// A `CallToolResult` (wire JSON) as a tool output.
pub fn convert_result(v: &Value) -> ToolOutput {
    let mut out = ToolOutput { content: Vec::new(), is_error: v["isError"].as_bool().unwrap_or(false) };
    let s = |b: &Value, k: &str| b.get(k).and_then(Value::as_str).map(str::to_string);
    for b in v["content"].as_array().into_iter().flatten() {
        let c = match b["type"].as_str().unwrap_or("") {
            "text" => Content::Text(s(b, "text").unwrap_or_default()),
            "image" => Content::Image {
                mime: s(b, "mimeType").unwrap_or_else(|| "image/png".into()),
                data: s(b, "data").unwrap_or_default(),
            },
            "audio" => Content::Text(format!(
                "[audio ({}) omitted]",
                s(b, "mimeType").unwrap_or_else(|| "unknown type".into())
            )),
            "resource_link" => Content::Link {
                uri: s(b, "uri").unwrap_or_default(),
                name: s(b, "name").unwrap_or_default(),
                mime: s(b, "mimeType"),
                description: s(b, "description"),
            },
            "resource" => {
                let r = &b["resource"];
                let uri = s(r, "uri").unwrap_or_default();
                let mime = s(r, "mimeType");
                match (s(r, "text"), s(r, "blob")) {
                    (Some(t), _) => Content::Text(format!("[resource {uri}]\n{t}")),
                    (None, Some(blob)) if mime.as_deref().is_some_and(|m| m.starts_with("image/")) => {
                        Content::Image { mime: mime.unwrap_or_default(), data: blob }
                    }
                    (None, Some(blob)) => Content::Text(format!(
                        "[resource {uri} ({}), {} bytes of binary content omitted]",
                        mime.unwrap_or_else(|| "application/octet-stream".into()),
                        blob.len() / 4 * 3
                    )),
                    (None, None) => Content::Text(format!("[resource {uri}]")),
                }
            }
            _ => Content::Text(b.to_string()),
        };
        out.content.push(c);
    }
    // The spec has servers repeat structured content in a text block, often
    // in their own words (server-filesystem's file text, the Python SDK's
    // `Echo: one` for `{"result": "Echo: one"}`): with any text block there,
    // the JSON would only say it twice. Without one, it is all there is.
    if let Some(sc) = v.get("structuredContent").filter(|x| !x.is_null())
        && !out.content.iter().any(|c| matches!(c, Content::Text(_)))
    {
        out.content.push(Content::Text(sc.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn converts_every_block_kind() {
        let v = json!({"content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "data": "iVBO", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "test://a", "name": "a", "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "test://b", "text": "body"}},
            {"type": "resource", "resource": {"uri": "test://c", "blob": "AAAA", "mimeType": "application/zip"}},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}],
            "structuredContent": {"x": 1}, "isError": true});
        let out = convert_result(&v);
        assert!(out.is_error);
        assert_eq!(out.images().count(), 1);
        let text = out.model_text(false);
        // A text block is there, so the structured content is not added again.
        assert!(!text.contains("{\"x\":1}"), "{text}");
        for want in ["hi", "test://a", "[resource test://b]\nbody", "application/zip", "audio/wav"] {
            assert!(text.contains(want), "{want} in {text}");
        }
        let repeated = convert_result(
            &json!({"content": [{"type": "text", "text": "{\"x\": 1}"}], "structuredContent": {"x": 1}}),
        );
        assert_eq!(repeated.content.len(), 1);
    }

    /// Issue 26, item 3: a text block in the server's own words is not
    /// followed by the same content as JSON.
    #[test]
    fn structured_content_is_not_repeated_after_a_text_block() {
        let python_sdk = json!({"content": [{"type": "text", "text": "Echo: one"}],
            "structuredContent": {"result": "Echo: one"}, "isError": false});
        assert_eq!(convert_result(&python_sdk).model_text(false), "Echo: one");
        let filesystem = json!({"content": [{"type": "text", "text": "line 1\nline 2"}],
            "structuredContent": {"content": "line 1\nline 2"}});
        assert_eq!(convert_result(&filesystem).model_text(false), "line 1\nline 2");
        let only_structured = json!({"content": [], "structuredContent": {"temperature": 22}});
        assert_eq!(convert_result(&only_structured).model_text(false), "{\"temperature\":22}");
    }
}
