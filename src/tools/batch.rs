//! The dispatcher: resolves a call's name in a catalog, checks its arguments
//! against the tool's schema, runs it under its time limit, and always comes
//! back with a result for the model — invalid arguments, timeouts, backend
//! failures and even a panicking tool become error results, never a failed
//! request. A batch of calls runs concurrently; results keep call order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tracing::Instrument as _;

use super::{Catalog, ToolOutput};

/// A call the model made.
#[derive(Debug, Clone)]
pub struct CallRequest {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (a JSON string).
    pub arguments: String,
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// The tool ran and reported an error (or its backend failed).
    Error,
    /// The arguments did not match the schema (the tool did not run).
    InvalidArguments,
    Timeout,
    /// No such server tool (the tool did not run).
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::InvalidArguments => "invalid_arguments",
            Status::Timeout => "timeout",
            Status::Unknown => "unknown_tool",
        }
    }
}

/// A finished call.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    pub call: CallRequest,
    pub output: ToolOutput,
    pub status: Status,
    pub duration: Duration,
}

impl Catalog {
    /// Runs one call. `cap` bounds the tool's own time limit (the loop's
    /// remaining deadline).
    pub async fn call(&self, name: &str, arguments: &str, cap: Option<Duration>) -> (ToolOutput, Status) {
        let Some(entry) = self.get(name) else {
            return (ToolOutput::error(format!("There is no tool named `{name}`.")), Status::Unknown);
        };
        let args = match parse_args(arguments) {
            Ok(a) => a,
            Err(msg) => return (ToolOutput::error(msg), Status::InvalidArguments),
        };
        if let Some(v) = &entry.validator {
            let errors: Vec<String> = v
                .iter_errors(&args)
                .take(10)
                .map(|e| {
                    let at = e.instance_path().to_string();
                    if at.is_empty() { e.to_string() } else { format!("at {at}: {e}") }
                })
                .collect();
            if !errors.is_empty() {
                return (
                    ToolOutput::error(format!(
                        "Invalid arguments for `{name}`: {}. Expected arguments matching this JSON schema: {}",
                        errors.join("; "),
                        entry.spec.parameters
                    )),
                    Status::InvalidArguments,
                );
            }
        }
        let limit = cap.map_or(entry.timeout, |c| c.min(entry.timeout));
        let span = tracing::info_span!("tool", name = %name);
        match tokio::time::timeout(limit, entry.tool.call(args)).instrument(span).await {
            Err(_) => (
                ToolOutput::error(format!("The tool `{name}` did not finish within {:.1}s.", limit.as_secs_f64())),
                Status::Timeout,
            ),
            Ok(Err(e)) => (ToolOutput::error(e.to_string()), Status::Error),
            Ok(Ok(out)) => {
                let status = if out.is_error { Status::Error } else { Status::Ok };
                (out, status)
            }
        }
    }
}

/// Arguments as a JSON object; empty text is `{}`.
fn parse_args(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(format!("The arguments must be a JSON object, got: {other}")),
        Err(e) => Err(format!("The arguments are not valid JSON ({e}): {text}")),
    }
}

/// Runs a batch of calls concurrently, each in its own task so a panicking
/// tool is contained; results are in call order. Dropping the future aborts
/// the calls still running (the client went away).
pub async fn run_batch(catalog: Arc<Catalog>, calls: Vec<CallRequest>, cap: Option<Duration>) -> Vec<CallOutcome> {
    let mut set = tokio::task::JoinSet::new();
    for (i, call) in calls.iter().cloned().enumerate() {
        let catalog = catalog.clone();
        set.spawn(async move {
            let start = Instant::now();
            let (output, status) = catalog.call(&call.name, &call.arguments, cap).await;
            (i, CallOutcome { call, output, status, duration: start.elapsed() })
        });
    }
    let mut slots: Vec<Option<CallOutcome>> = vec![None; calls.len()];
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, outcome)) => slots[i] = Some(outcome),
            Err(e) => tracing::error!("a tool task failed: {e}"),
        }
    }
    slots
        .into_iter()
        .zip(calls)
        .map(|(slot, call)| {
            slot.unwrap_or_else(|| CallOutcome {
                output: ToolOutput::error(format!("The tool `{}` failed unexpectedly.", call.name)),
                call,
                status: Status::Error,
                duration: Duration::ZERO,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Source, Tool, ToolError, ToolSpec};
    use futures_util::future::BoxFuture;
    use serde_json::json;

    struct Fixed(&'static str, u64, bool);
    impl Tool for Fixed {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: self.0.into(),
                description: String::new(),
                parameters: json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
            }
        }
        fn call(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(self.1)).await;
                if self.2 {
                    panic!("tool bug");
                }
                Ok(ToolOutput::text(format!("{}:{}", self.0, args["n"])))
            })
        }
    }

    fn catalog() -> Arc<Catalog> {
        let mut c = Catalog::default();
        for t in [Fixed("slow", 60, false), Fixed("fast", 0, false), Fixed("boom", 0, true), Fixed("hang", 5000, false)]
        {
            let spec = t.spec();
            c.push(spec, Arc::new(t), Source::Builtin, true, Duration::from_millis(300));
        }
        Arc::new(c)
    }

    fn req(name: &str, args: &str) -> CallRequest {
        CallRequest { id: format!("id-{name}"), name: name.into(), arguments: args.into() }
    }

    // Paused clock: the timings below are virtual, so the concurrency check is exact, not a race.
    #[tokio::test(start_paused = true)]
    async fn batch_runs_concurrently_in_order_and_contains_failures() {
        let calls = vec![
            req("slow", r#"{"n": 1}"#),
            req("fast", r#"{"n": 2}"#),
            req("fast", r#"{"n": "x"}"#),
            req("fast", "not json"),
            req("nope", "{}"),
            req("boom", r#"{"n": 3}"#),
            req("hang", r#"{"n": 4}"#),
        ];
        let start = tokio::time::Instant::now();
        let out = run_batch(catalog(), calls, None).await;
        // One 300 ms timeout, not 60 ms + 300 ms one after another.
        assert!(start.elapsed() < Duration::from_millis(360), "{:?}", start.elapsed());
        let st: Vec<Status> = out.iter().map(|o| o.status).collect();
        assert_eq!(
            st,
            [
                Status::Ok,
                Status::Ok,
                Status::InvalidArguments,
                Status::InvalidArguments,
                Status::Unknown,
                Status::Error,
                Status::Timeout
            ]
        );
        assert_eq!(out[0].output.model_text(false), "slow:1");
        assert!(out[2].output.model_text(false).contains("/n"), "{:?}", out[2].output);
    }
}
