//! The Responses API front end (`POST /v1/responses`,
//! `GET /v1/responses/{id}`), translated onto chat completions rather than
//! implemented twice: [`request`] turns the body (and the stored history of
//! `previous_response_id`) into a `ChatRequest`, which takes exactly the
//! path of `/v1/chat/completions` (routing, dispatch, the normalizer with
//! tool-call recovery, the agent loop with server-side tools and skills, the
//! reasoning round trip); [`events`] turns the normalized chunks into the
//! Responses event stream or one response object; [`store`] keeps finished
//! responses in the conversation-state store. The HTTP handler is
//! `server/responses.rs`.

pub mod events;
pub mod request;
pub mod store;
