//! A skill's scripts as tools (only with `[skills] allow_scripts = true`):
//! `scripts/<file>` of skill `<skill>` is the tool `<skill>__<stem>`. A run
//! happens in the skill's folder with a scrubbed environment (a fixed `PATH`
//! only), the arguments as JSON on standard input, and a time limit; its
//! standard output (capped) is the result, a non-zero exit an error result
//! with the end of standard error. The script leads its own process group,
//! and the whole group is killed when the script exits, times out or the
//! call is dropped (client gone): nothing it started outlives the call.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::tools::{Tool, ToolError, ToolOutput, ToolSpec, sanitize_name};

/// The only environment a script gets.
const SAFE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Characters of standard error kept in an error result.
const STDERR_TAIL: usize = 2000;

/// The tool name of a script (OpenAI's function-name rules).
pub fn tool_name(skill: &str, script: &Path) -> String {
    let stem = script.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    sanitize_name(&format!("{skill}__{stem}"))
}

pub struct ScriptTool {
    pub name: String,
    pub skill: String,
    pub path: PathBuf,
    pub dir: PathBuf,
    pub timeout: Duration,
    pub max_output: usize,
}

impl Tool for ScriptTool {
    fn spec(&self) -> ToolSpec {
        let file = self.path.strip_prefix(&self.dir).unwrap_or(&self.path).display().to_string();
        ToolSpec {
            name: self.name.clone(),
            description: format!(
                "Runs `{file}` of the skill `{}` (its instructions say how). The arguments are passed to the \
                 script as a JSON object on standard input; its standard output is the result.",
                self.skill
            ),
            parameters: json!({"type": "object"}),
        }
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            match tokio::time::timeout(self.timeout, self.run(&args)).await {
                Ok(r) => r,
                Err(_) => Ok(ToolOutput::error(format!(
                    "the script did not finish within {:.1}s and was stopped",
                    self.timeout.as_secs_f64()
                ))),
            }
        })
    }
}

impl ScriptTool {
    /// The command for the script: itself when executable, else the
    /// interpreter its extension names.
    fn command(&self) -> Result<tokio::process::Command, String> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if std::fs::metadata(&self.path).is_ok_and(|m| m.permissions().mode() & 0o111 != 0) {
                return Ok(tokio::process::Command::new(&self.path));
            }
        }
        let ext = self.path.extension().and_then(|e| e.to_str()).unwrap_or_default();
        let interpreter = match ext {
            "py" => "python3",
            "sh" => "sh",
            "bash" => "bash",
            "js" | "mjs" => "node",
            _ => return Err(format!("{} is not executable and has no known interpreter", self.path.display())),
        };
        let mut c = tokio::process::Command::new(interpreter);
        c.arg(&self.path);
        Ok(c)
    }

    async fn run(&self, args: &Value) -> Result<ToolOutput, ToolError> {
        let mut cmd = match self.command() {
            Ok(c) => c,
            Err(e) => return Ok(ToolOutput::error(e)),
        };
        cmd.current_dir(&self.dir)
            .env_clear()
            .env("PATH", SAFE_PATH)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd.spawn().map_err(|e| ToolError::Failed(format!("cannot start the script: {e}")))?;
        let group = Group(child.id());
        let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let input = args.to_string();
        let write = async move {
            if let Some(mut s) = stdin {
                // A script that does not read its input closes the pipe early; that is fine.
                let _ = s.write_all(input.as_bytes()).await;
            }
        };
        // Once the script exits, what it left running goes too (and lets go
        // of the pipes, so the reads end).
        let waited = async {
            let status = child.wait().await;
            group.kill();
            status
        };
        let (_, (out, cut), (err, _), status) =
            tokio::join!(write, capped(stdout, self.max_output), capped(stderr, 64 * 1024), waited);
        let status = status.map_err(|e| ToolError::Failed(format!("the script failed: {e}")))?;
        let mut text = String::from_utf8_lossy(&out).into_owned();
        if cut {
            text.push_str(&format!("\n[output cut at {} bytes]", self.max_output));
        }
        if status.success() {
            return Ok(ToolOutput::text(text));
        }
        let err = String::from_utf8_lossy(&err);
        let n = err.chars().count();
        let tail: String = err.chars().skip(n.saturating_sub(STDERR_TAIL)).collect();
        let code = status.code().map_or("a signal".to_string(), |c| format!("status {c}"));
        Ok(ToolOutput::error(format!("the script exited with {code}: {}", tail.trim())))
    }
}

/// A child's process group (its id), killed when dropped.
pub(crate) struct Group(pub(crate) Option<u32>);

impl Group {
    /// SIGKILL to the whole group; a group that is gone already is fine.
    pub(crate) fn kill(&self) {
        #[cfg(target_os = "linux")]
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads a pipe to its end, keeping at most `cap` bytes (the rest is
/// drained so the process never blocks on a full pipe); `true` when cut.
async fn capped<R: AsyncRead + Unpin>(r: Option<R>, cap: usize) -> (Vec<u8>, bool) {
    let (mut buf, mut cut) = (Vec::new(), false);
    let Some(mut r) = r else { return (buf, cut) };
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(buf.len());
                cut |= n > room;
                buf.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    (buf, cut)
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;

    fn tool(dir: &Path, file: &str, body: &str, timeout_ms: u64) -> ScriptTool {
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        let path = dir.join("scripts").join(file);
        std::fs::write(&path, body).unwrap();
        ScriptTool {
            name: tool_name("s", &path),
            skill: "s".into(),
            path,
            dir: dir.into(),
            timeout: Duration::from_millis(timeout_ms),
            max_output: 16,
        }
    }

    #[tokio::test]
    async fn runs_in_the_folder_with_json_on_stdin_and_a_clean_env() {
        let d = tempfile::tempdir().unwrap();
        let t = tool(d.path(), "echo.sh", "read x; echo \"$x|${HOME:-none}|$(basename \"$PWD\")\"", 5000);
        assert_eq!(t.name, "s__echo");
        let out = t.call(json!({"a": 1})).await.unwrap();
        let text = out.model_text(false);
        assert!(!out.is_error, "{text}");
        assert!(text.starts_with("{\"a\":1}|none|"), "{text}");
        assert!(text.contains("[output cut at 16 bytes]"), "{text}");

        let t = tool(d.path(), "fail.sh", "echo oops >&2; exit 3", 5000);
        let out = t.call(json!({})).await.unwrap();
        assert!(out.is_error && out.model_text(false).contains("status 3: oops"), "{:?}", out);

        let t = tool(d.path(), "slow.sh", "sleep 20", 200);
        let start = std::time::Instant::now();
        let out = t.call(json!({})).await.unwrap();
        assert!(out.is_error && out.model_text(false).contains("did not finish"));
        assert!(start.elapsed() < Duration::from_secs(5));

        let t = tool(d.path(), "env.sh", "env", 5000);
        let t = ScriptTool { max_output: 4096, ..t };
        let env = t.call(json!({})).await.unwrap().model_text(false);
        let names: Vec<&str> = env.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
        assert!(names.iter().all(|n| ["PATH", "PWD", "SHLVL", "_", "OLDPWD"].contains(n)), "{env}");

        let t = tool(d.path(), "data.bin", "x", 1000);
        assert!(t.call(json!({})).await.unwrap().model_text(false).contains("no known interpreter"));
    }

    /// Whether a process still runs a second after it was sent SIGKILL
    /// (a zombie waiting to be reaped does not run).
    #[cfg(target_os = "linux")]
    fn running(pid: &str) -> bool {
        let alive = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
        };
        let start = std::time::Instant::now();
        while alive() {
            if start.elapsed() > Duration::from_secs(1) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn what_a_script_starts_does_not_outlive_the_call() {
        let d = tempfile::tempdir().unwrap();
        // A background child holding stdout open, and one that does not.
        let t = tool(d.path(), "bg.sh", "sleep 30 & echo $!; sleep 30 >/dev/null 2>&1 & echo $!", 20_000);
        let t = ScriptTool { max_output: 4096, ..t };
        let start = std::time::Instant::now();
        let out = t.call(json!({})).await.unwrap();
        assert!(!out.is_error, "{out:?}");
        assert!(start.elapsed() < Duration::from_secs(10), "the call waited for its background children");
        let text = out.model_text(false);
        let pids: Vec<&str> = text.lines().collect();
        assert_eq!(pids.len(), 2, "{text}");
        for pid in pids {
            assert!(!running(pid), "background process {pid} outlived the script");
        }

        // Timed out: the script and its children are stopped.
        let t = tool(d.path(), "slow_bg.sh", "sleep 30 & echo $! > bg.pid; sleep 30", 300);
        let out = t.call(json!({})).await.unwrap();
        assert!(out.is_error && out.model_text(false).contains("did not finish"));
        let pid = std::fs::read_to_string(d.path().join("bg.pid")).unwrap();
        assert!(!running(pid.trim()), "a timed-out script's child {pid} lives on");
    }
}
