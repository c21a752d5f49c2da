//! The Streamable HTTP client of MCP sessions: reqwest, plus one reading of
//! the server's answers. A server that restarted no longer knows our session
//! id. The spec has it answer 404, which rmcp takes as the session's end (it
//! initializes a new one and sends the request again); server-everything and
//! others answer 400 with a JSON-RPC error that has no id, which matches no
//! request, so the call waited out its whole timeout, and every call after it.
//! Such an answer to a request sent in a session is read as that 404: the
//! server refused it before running anything, so sending it again is safe.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};

/// reqwest, with an id-less error to a request in a session read as the
/// session's end.
#[derive(Clone)]
pub struct SessionClient(pub reqwest::Client);

/// An error answer that names no request: the server could not place it in
/// our session.
fn uncorrelated(m: &ServerJsonRpcMessage) -> bool {
    matches!(m, JsonRpcMessage::Error(e) if e.id.is_none())
}

impl StreamableHttpClient for SessionClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let in_session = session_id.is_some() && matches!(message, JsonRpcMessage::Request(_));
        let r = self.0.post_message(uri, message, session_id, auth_header, custom_headers).await;
        expire(in_session, r)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let in_session = session_id.is_some() && matches!(message, JsonRpcMessage::Request(_));
        let r = self
            .0
            .post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits)
            .await;
        expire(in_session, r)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0.delete_session(uri, session_id, auth_header, custom_headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0.get_stream(uri, session_id, last_event_id, auth_header, custom_headers).await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

fn expire<E: std::error::Error + Send + Sync + 'static>(
    in_session: bool,
    r: Result<StreamableHttpPostResponse, StreamableHttpError<E>>,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<E>> {
    match r {
        Ok(StreamableHttpPostResponse::Json(m, _)) if in_session && uncorrelated(&m) => {
            tracing::info!("MCP server did not know our session (it restarted?); starting a new one");
            Err(StreamableHttpError::SessionExpired)
        }
        Err(StreamableHttpError::UnexpectedServerResponse(why)) if in_session && why.starts_with("HTTP 400") => {
            tracing::info!("MCP server refused our session ({why}); starting a new one");
            Err(StreamableHttpError::SessionExpired)
        }
        r => r,
    }
}
