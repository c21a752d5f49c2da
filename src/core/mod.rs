//! One request's whole way through the proxy, whatever API front it came
//! in by: routing and the fallback chain ([`route`]), request rewriting
//! and the upstream call (`provider`), the reasoning round trip
//! ([`reasoning`]), normalization of the answer (`stream`, in [`pipeline`]),
//! the agent loop with server-side tools and skills ([`agent`]), images
//! described for models that cannot see ([`vision`]), and answers held to
//! a JSON schema ([`structured`]). What
//! comes out is normalized chat chunks (or the upstream's bytes where
//! nothing needed changing) and trace entries: no HTTP type, no SSE; the
//! fronts (`fronts/`) turn them into their wire format.

pub mod agent;
pub mod answer;
pub mod context;
pub mod pipeline;
pub mod reasoning;
pub mod route;
pub mod structured;
pub mod vision;

use std::sync::Arc;
use std::time::Duration;

use crate::provider::Providers;
use crate::provider::upstream::Upstream;
use crate::state::StateStore;

pub use answer::{answer, looping, route_for, server_tool_names};
pub use pipeline::{Out, Started, start};

/// What every request's way needs, built once at startup.
pub struct Core {
    pub providers: Providers,
    pub upstream: Upstream,
    /// Conversation state (reasoning to replay, hidden tool exchanges).
    pub store: Arc<dyn StateStore>,
    /// How long conversation state is kept.
    pub state_ttl: Duration,
    /// Server-side tools and skills; `None` (or nothing active) keeps every
    /// request on the plain path.
    pub tools: Option<Arc<crate::tools::Registry>>,
    /// What one request may weigh and its answer hold (`[limits]`).
    pub limits: crate::config::limits::LimitsConfig,
    /// The `[responses]` settings (hosted tools it may drop).
    pub responses: crate::config::responses::ResponsesConfig,
    /// The keys sealing state a client carries (encrypted reasoning).
    pub sealer: Arc<crate::state::sealed::Keyring>,
    /// The model that describes images for models that cannot see
    /// (`[vision_bridge]`, see [`vision`]).
    pub vision_bridge: Option<crate::config::vision::VisionBridgeConfig>,
}
