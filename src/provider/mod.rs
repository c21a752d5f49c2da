//! Providers: profiles (vendor data), the resolved set of configured
//! providers, and routing a request's `model` to one of them.

pub mod context;
pub mod direct;
mod errors;
pub mod keys;
mod messages;
mod profile;
pub mod prompt_tools;
pub mod record;
pub mod request;
pub mod resilience;
pub mod scenario;
mod sse_in;
pub mod tools;
pub mod upstream;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

pub use errors::{UpstreamError, error_in_success, map_error};
pub use profile::{
    ConflictFallback, Profile, PromptFormat, ReasoningReplay, ThinkingConflict, ThinkingStyle, ToolMode,
};

use crate::config::{Config, ConfigError, ProviderConfig, UpstreamConfig};
use crate::toolcall::FormatSet;

/// Profiles compiled into the binary from `providers/*.toml`.
static BUNDLED: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/bundled_profiles.rs"));

/// All known profiles: bundled, then the user folder's (which win by id).
pub fn load_profiles(user_dir: Option<&Path>) -> Result<BTreeMap<String, Profile>, ConfigError> {
    let mut out = BTreeMap::new();
    for (id, text) in BUNDLED {
        let p = Profile::parse(id, text).map_err(|e| ConfigError::Invalid(format!("bundled profile {id}: {e}")))?;
        out.insert(id.to_string(), p);
    }
    let Some(dir) = user_dir.filter(|d| d.is_dir()) else {
        return Ok(out);
    };
    let entries = std::fs::read_dir(dir).map_err(|source| ConfigError::Read { path: dir.into(), source })?;
    for e in entries.filter_map(Result::ok) {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let id = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
        let p = Profile::parse(&id, &text).map_err(|e| ConfigError::Invalid(format!("{}: {e}", path.display())))?;
        out.insert(id, p);
    }
    Ok(out)
}

/// One configured provider, resolved.
#[derive(Debug)]
pub struct Provider {
    /// The model prefix clients use.
    pub name: String,
    pub profile: Profile,
    pub base_url: String,
    /// `<base_url>/chat/completions`, parsed once: the URL of nearly every
    /// request (`None` if it does not parse; the request then reports it).
    chat_url: Option<reqwest::Url>,
    /// The same URL when chat requests go straight through hyper's client
    /// (see [`direct::direct_uri`]).
    direct_chat: Option<direct::DirectUrl>,
    /// The keys, read from the environment at startup; never logged (a key
    /// is named by its position).
    pub keys: keys::KeyPool,
    pub mode: ToolMode,
    /// Hidden re-asks of an answer that does not hold to its schema
    /// (`structured_retries`); the profile keeps the mode.
    pub structured_retries: u32,
    pub models: Vec<String>,
    pub upstream: UpstreamConfig,
    /// Text formats by model glob, first match wins: as configured, and with
    /// the prompt format added (for prompt mode).
    formats: Vec<(globset::GlobMatcher, Formats)>,
    /// Formats for models that match no glob (all of them).
    all_formats: Formats,
    /// Models that get prompt-mode tools whatever the provider's mode.
    prompt_models: Vec<globset::GlobMatcher>,
    /// Reasoning splitting only (no tool recovery).
    no_formats: Arc<FormatSet>,
    /// The formats recovered from reasoning (`[tools] from_reasoning`).
    reasoning_formats: Option<Arc<FormatSet>>,
    /// This provider's circuit breaker.
    pub breaker: resilience::Breaker,
    /// The upstream model names the config or profile knows (`models`,
    /// alias targets): the only `model` label values of its metrics.
    known_models: std::collections::HashSet<String, foldhash::fast::RandomState>,
    /// Prices by model glob: the config's, then the profile's.
    pub prices: crate::spend::Prices,
    /// Context windows and the vendor's overflow errors.
    pub context: context::Context,
    /// Which models take images: the config's `vision` for every model,
    /// else the profile's globs (longest first), else its default (if any).
    sight: Sight,
}

/// Which of a provider's models take images (see [`Provider::sees`]).
#[derive(Debug)]
struct Sight {
    all: Option<bool>,
    /// Every glob in one set (a matcher each held a regex of its own, per
    /// provider), most specific (longest) first, with what it says.
    globs: globset::GlobSet,
    sees: Vec<bool>,
    default: Option<bool>,
}

impl Sight {
    fn new(name: &str, pc: &ProviderConfig, profile: &Profile) -> Result<Self, ConfigError> {
        let mut set = globset::GlobSetBuilder::new();
        let mut sees = Vec::new();
        let mut by_len: Vec<_> = profile.vision.models.iter().collect();
        by_len.sort_by_key(|(g, _)| std::cmp::Reverse(g.len()));
        for (glob, on) in by_len {
            let g = globset::Glob::new(&glob.to_ascii_lowercase())
                .map_err(|e| ConfigError::Invalid(format!("provider {name}: [vision] glob {glob:?}: {e}")))?;
            set.add(g);
            sees.push(*on);
        }
        let globs = set.build().map_err(|e| ConfigError::Invalid(format!("provider {name}: [vision] globs: {e}")))?;
        let default = profile.vision.default.or(profile.tools.vision.then_some(true));
        Ok(Sight { all: pc.vision, globs, sees, default })
    }
}

impl Provider {
    /// The first key (requests that take no part in the pool's rotation).
    pub fn api_key(&self) -> Option<&str> {
        self.keys.first()
    }

    /// `model` as a metrics label: itself when the config or profile knows
    /// it, else `other` (model names come from clients; a label per name
    /// would grow the series without bound).
    pub fn metric_model<'a>(&self, model: &'a str) -> &'a str {
        if self.knows_model(model) { model } else { crate::metrics::OTHER_MODEL }
    }

    /// Whether the config or profile knows `model` (an upstream model name).
    pub fn knows_model(&self, model: &str) -> bool {
        self.known_models.contains(model)
    }

    /// The parsed upstream URL of `path` when it is the one kept parsed
    /// (`chat/completions`); other paths are joined to `base_url` per call.
    pub fn parsed_url(&self, path: &str) -> Option<reqwest::Url> {
        self.chat_url.as_ref().filter(|_| path.trim_start_matches('/') == "chat/completions").cloned()
    }

    /// The direct-client URI of `path`, for `chat/completions` to a cleartext,
    /// unproxied upstream.
    pub fn direct_url(&self, path: &str) -> Option<&direct::DirectUrl> {
        self.direct_chat.as_ref().filter(|_| path.trim_start_matches('/') == "chat/completions")
    }

    /// Whether `model`'s tools are emulated by prompt (the provider's mode,
    /// or `[tools] prompt_models`).
    pub fn prompt_for(&self, model: &str) -> bool {
        let model = model.to_ascii_lowercase();
        self.mode == ToolMode::Prompt || self.prompt_models.iter().any(|g| g.is_match(&model))
    }

    /// The tool-call formats to recover for `model` (`None` set when the
    /// mode or the request calls for no recovery). `prompt` says the tools
    /// were emulated by prompt for this request, so the prompt's format is
    /// always among them.
    pub fn formats_for(&self, model: &str, declares_tools: bool, prompt: bool) -> Arc<FormatSet> {
        let recover = prompt
            || match self.mode {
                ToolMode::Native => false,
                ToolMode::Text | ToolMode::Prompt => true,
                ToolMode::Auto => declares_tools,
            };
        if !recover {
            return self.no_formats.clone();
        }
        let model = model.to_ascii_lowercase();
        let f = self.formats.iter().find(|(g, _)| g.is_match(&model)).map_or(&self.all_formats, |(_, f)| f);
        if prompt { f.with_prompt.clone() } else { f.plain.clone() }
    }
}

impl Provider {
    /// The formats to recover from the reasoning of a response (`None`: the
    /// reasoning is left alone): only for requests that declared tools, and
    /// not in native mode (which recovers nothing from text).
    pub fn reasoning_formats_for(&self, declares_tools: bool) -> Option<Arc<FormatSet>> {
        let recover = declares_tools && self.mode != ToolMode::Native;
        self.reasoning_formats.clone().filter(|_| recover)
    }

    /// Whether `model` takes images (`Some(false)`: they go to
    /// `[vision_bridge]`); `None` when neither the config nor the profile
    /// says (a profile of its own without `[vision]`): images are sent on.
    pub fn sees(&self, model: &str) -> Option<bool> {
        if let Some(all) = self.sight.all {
            return Some(all);
        }
        let model = model.to_ascii_lowercase();
        // The lowest index that matches is the most specific glob.
        let first = self.sight.globs.matches(&model).into_iter().min();
        first.and_then(|i| self.sight.sees.get(i).copied()).or(self.sight.default)
    }
}

/// One format choice, without and with the prompt format.
#[derive(Debug)]
struct Formats {
    plain: Arc<FormatSet>,
    with_prompt: Arc<FormatSet>,
}

impl Formats {
    fn named(names: &[String], prompt: &str, provider: &str, sets: &mut FormatSets) -> Result<Self, ConfigError> {
        let mut with: Vec<String> = names.to_vec();
        with.push(prompt.to_string());
        Ok(Formats { plain: sets.named(names, provider)?, with_prompt: sets.named(&with, provider)? })
    }

    fn all(sets: &mut FormatSets) -> Result<Self, ConfigError> {
        // "*" names no format: the key cannot collide with a named set.
        let all = sets.get(&["*".into()], || Ok(FormatSet::all()))?;
        Ok(Formats { plain: all.clone(), with_prompt: all })
    }
}

/// The format sets built while resolving, by their sorted format names: the
/// providers share equal sets. Each set's Aho-Corasick automaton is large,
/// and with one set per provider they were most of the
/// idle process's memory (every bundled profile is a provider by default).
#[derive(Default)]
struct FormatSets(std::collections::HashMap<Vec<String>, Arc<FormatSet>>);

impl FormatSets {
    /// The set of `names` (any order), built on first use.
    fn get(
        &mut self,
        names: &[String],
        build: impl FnOnce() -> Result<FormatSet, ConfigError>,
    ) -> Result<Arc<FormatSet>, ConfigError> {
        let mut key = names.to_vec();
        key.sort();
        key.dedup();
        if let Some(set) = self.0.get(&key) {
            return Ok(set.clone());
        }
        let set = Arc::new(build()?);
        self.0.insert(key, set.clone());
        Ok(set)
    }

    fn named(&mut self, names: &[String], provider: &str) -> Result<Arc<FormatSet>, ConfigError> {
        self.get(names, || named(names, provider))
    }
}

/// Where one request goes.
#[derive(Debug, Clone)]
pub struct Route {
    pub provider: Arc<Provider>,
    /// The model name the upstream knows.
    pub model: String,
}

/// Every configured provider and the aliases.
#[derive(Debug, Default)]
pub struct Providers {
    by_name: BTreeMap<String, Arc<Provider>>,
    /// Alias → targets, tried in order (fallback chain).
    aliases: BTreeMap<String, Vec<String>>,
    /// The aliases that are globs (`claude-*haiku*`), the longest pattern
    /// first: a name no alias names exactly takes the first that matches.
    alias_globs: Vec<(globset::GlobMatcher, String)>,
    default: Option<String>,
    /// `[routes]`.
    scenarios: scenario::Scenarios,
}

impl Providers {
    /// Resolves the config: with no `[providers]`, every profile becomes a
    /// provider under its own id (keys from the environment).
    pub fn resolve(config: &Config, profiles: &BTreeMap<String, Profile>) -> Result<Self, ConfigError> {
        let mut tables = config.providers.clone();
        if tables.is_empty() {
            for (id, _) in profiles.iter().filter(|(_, p)| !p.fallback) {
                tables.insert(id.clone(), Default::default());
            }
        }
        let aliases: BTreeMap<String, Vec<String>> =
            config.models.iter().map(|(a, t)| (a.clone(), t.targets())).collect();
        let mut by_name = BTreeMap::new();
        let mut sets = FormatSets::default();
        for (name, pc) in &tables {
            if name.contains('/') || name.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "provider name {name:?} must be non-empty and contain no '/'"
                )));
            }
            let mut profile = profile_for(name, pc, profiles)?.clone();
            if let Some(m) = pc.structured_outputs {
                profile.request.structured_outputs = Some(m);
            }
            let key_env = pc.api_key_env.clone().or_else(|| profile.api_key_env.clone());
            let mut api_keys: Vec<String> =
                key_env.and_then(|v| std::env::var(v).ok()).filter(|k| !k.trim().is_empty()).into_iter().collect();
            if let Some(v) = pc.api_keys_env.as_ref().and_then(|v| std::env::var(v).ok()) {
                api_keys.extend(keys::KeyPool::split(&v));
            }
            let rest = pc.key_rest_secs.unwrap_or(300.0);
            if !(rest.is_finite() && rest >= 0.0) {
                return Err(ConfigError::Invalid(format!(
                    "provider {name}: key_rest_secs must be a number of seconds"
                )));
            }
            let prompt_fmt = profile.tools.prompt_format.recovery_format();
            let mut formats = Vec::new();
            let all_formats = match &pc.formats {
                Some(names) => Formats::named(names, prompt_fmt, name, &mut sets)?,
                None => {
                    // The most specific (longest) glob wins, whatever the key order.
                    let mut globs: Vec<_> = profile.tools.formats.iter().collect();
                    globs.sort_by_key(|(g, _)| std::cmp::Reverse(g.len()));
                    for (glob, names) in globs {
                        let g = globset::Glob::new(&glob.to_ascii_lowercase())
                            .map_err(|e| ConfigError::Invalid(format!("provider {name}: model glob {glob:?}: {e}")))?;
                        formats.push((g.compile_matcher(), Formats::named(names, prompt_fmt, name, &mut sets)?));
                    }
                    Formats::all(&mut sets)?
                }
            };
            let mut prompt_models = Vec::new();
            for glob in &profile.tools.prompt_models {
                let g = globset::Glob::new(&glob.to_ascii_lowercase())
                    .map_err(|e| ConfigError::Invalid(format!("provider {name}: prompt_models glob {glob:?}: {e}")))?;
                prompt_models.push(g.compile_matcher());
            }
            if let Some(c) = &profile.tools.name_chars {
                regex::Regex::new(c)
                    .map_err(|e| ConfigError::Invalid(format!("provider {name}: [tools] name_chars {c:?}: {e}")))?;
            }
            let base_url =
                pc.base_url.clone().unwrap_or_else(|| profile.base_url.clone()).trim_end_matches('/').to_string();
            if base_url.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "provider {name}: no base_url (profile {} has none; set one in [providers.{name}])",
                    profile.id
                )));
            }
            let models = pc.models.clone().unwrap_or_else(|| profile.models.clone());
            let is_default = config.default_provider.as_deref() == Some(name.as_str());
            let mut known_models: std::collections::HashSet<String, foldhash::fast::RandomState> =
                models.iter().cloned().collect();
            let scenario_targets =
                [&config.routes.long_context, &config.routes.background, &config.routes.think, &config.routes.image]
                    .into_iter()
                    .flatten()
                    .flat_map(crate::config::ModelAlias::targets)
                    .collect::<Vec<_>>();
            for t in aliases.values().flatten().chain(scenario_targets.iter()) {
                match t.split_once('/') {
                    Some((prefix, m)) if prefix == name.as_str() => known_models.insert(m.to_string()),
                    // A target without a configured prefix goes to the default provider.
                    _ if is_default && t.split_once('/').is_none_or(|(p, _)| !tables.contains_key(p)) => {
                        known_models.insert(t.clone())
                    }
                    _ => false,
                };
            }
            let provider = Provider {
                name: name.clone(),
                chat_url: reqwest::Url::parse(&format!("{base_url}/chat/completions")).ok(),
                // hyper's client follows no redirect: a profile that wants them goes through reqwest.
                direct_chat: direct::direct_uri(&format!("{base_url}/chat/completions"))
                    .filter(|_| !profile.follow_redirects),
                base_url,
                keys: keys::KeyPool::new(name, api_keys, std::time::Duration::from_secs_f64(rest.min(86_400.0))),
                mode: pc.tool_calls.or(profile.tools.mode).unwrap_or_default(),
                structured_retries: pc.structured_retries.unwrap_or(1).min(5),
                models,
                upstream: match &pc.upstream {
                    Some(over) => config
                        .upstream
                        .merged(over)
                        .map_err(|e| ConfigError::Invalid(format!("provider {name}: [upstream]: {e}")))?,
                    None => config.upstream.clone(),
                },
                formats,
                all_formats,
                prompt_models,
                no_formats: sets.get(&[], || Ok(FormatSet::none()))?,
                reasoning_formats: match profile.tools.from_reasoning.as_slice() {
                    [] => None,
                    names => Some(sets.named(names, name)?),
                },
                breaker: resilience::Breaker::default(),
                known_models,
                prices: crate::spend::Prices::new(&pc.prices, &profile.prices)
                    .map_err(|e| ConfigError::Invalid(format!("provider {name}: {e}")))?,
                context: context::Context::new(
                    name,
                    &profile.context_windows,
                    &pc.context_windows,
                    &profile.errors.context_overflow,
                )?,
                sight: Sight::new(name, pc, &profile)?,
                profile,
            };
            by_name.insert(name.clone(), Arc::new(provider));
        }
        if let Some(d) = &config.default_provider
            && !by_name.contains_key(d)
        {
            return Err(ConfigError::Invalid(format!("default_provider {d:?} is not a configured provider")));
        }
        if let Some((a, _)) = aliases.iter().find(|(_, t)| t.is_empty()) {
            return Err(ConfigError::Invalid(format!("[models] {a:?} names no target")));
        }
        let mut alias_globs = Vec::new();
        for a in aliases.keys().filter(|a| a.contains(['*', '?', '['])) {
            let g = globset::Glob::new(a).map_err(|e| ConfigError::Invalid(format!("[models] glob {a:?}: {e}")))?;
            alias_globs.push((g.compile_matcher(), a.clone()));
        }
        alias_globs.sort_by_key(|(_, a)| std::cmp::Reverse(a.len()));
        let scenarios = scenario::Scenarios::new(&config.routes);
        Ok(Providers { by_name, aliases, alias_globs, default: config.default_provider.clone(), scenarios })
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Provider>> {
        self.by_name.values()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Provider>> {
        self.by_name.get(name)
    }

    pub fn aliases(&self) -> &BTreeMap<String, Vec<String>> {
        &self.aliases
    }

    /// Routes a client model name: an alias, `provider/model`, or the default
    /// provider. For a fallback chain, its first target.
    pub fn route(&self, model: &str) -> Option<Route> {
        self.routes(model).into_iter().next()
    }

    /// Every route of a model name in fallback order (one unless it is an
    /// alias with a chain); targets naming no provider are skipped.
    pub fn routes(&self, model: &str) -> Vec<Route> {
        let glob = || self.alias_globs.iter().find(|(g, _)| g.is_match(model)).and_then(|(_, a)| self.aliases.get(a));
        match self.aliases.get(model).or_else(glob) {
            Some(targets) => targets.iter().filter_map(|t| self.route_target(t)).collect(),
            None => self.route_target(model).into_iter().collect(),
        }
    }

    /// The routes of a request: those of its scenario (`[routes]`) when it
    /// is in one and does not pin `provider/model`, else its model's.
    pub fn routes_for(&self, req: &crate::openai::ChatRequest) -> Vec<Route> {
        let pinned = req.model.split_once('/').is_some_and(|(p, _)| self.by_name.contains_key(p));
        if !pinned && let Some((scenario, targets)) = self.scenarios.of(req) {
            let routes: Vec<Route> = targets.iter().flat_map(|t| self.routes(t)).collect();
            if !routes.is_empty() {
                tracing::debug!(scenario, model = %req.model, "scenario route");
                return routes;
            }
        }
        self.routes(&req.model)
    }

    fn route_target(&self, target: &str) -> Option<Route> {
        if let Some((prefix, rest)) = target.split_once('/')
            && let Some(p) = self.by_name.get(prefix)
        {
            return Some(Route { provider: p.clone(), model: rest.to_string() });
        }
        let p = self.default.as_ref().and_then(|d| self.by_name.get(d))?;
        Some(Route { provider: p.clone(), model: target.to_string() })
    }
}

/// The profile of provider `name`: the one its table names, else the one
/// called `name`, else, for a table with a `base_url`, the fallback profile
/// (`providers/generic.toml`: any OpenAI-compatible server).
pub fn profile_for<'a>(
    name: &str,
    pc: &ProviderConfig,
    profiles: &'a BTreeMap<String, Profile>,
) -> Result<&'a Profile, ConfigError> {
    let pid = pc.profile.as_deref().unwrap_or(name);
    let fallback = || pc.profile.is_none().then(|| profiles.values().find(|p| p.fallback)).flatten();
    match profiles.get(pid) {
        Some(p) => Ok(p),
        None => match fallback().filter(|_| pc.base_url.is_some()) {
            Some(p) => Ok(p),
            None => Err(ConfigError::Invalid(format!(
                "provider {name}: no profile named {pid:?} (known: {}){}",
                profiles.keys().cloned().collect::<Vec<_>>().join(", "),
                if fallback().is_some() { "; with a base_url, any OpenAI-compatible server needs none" } else { "" }
            ))),
        },
    }
}

fn named(names: &[String], provider: &str) -> Result<FormatSet, ConfigError> {
    FormatSet::named(names)
        .map_err(|n| ConfigError::Invalid(format!("provider {provider}: unknown tool-call format {n:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_bundled_models_see_is_profile_data_and_the_config_overrides_it() {
        let profiles = load_profiles(None).unwrap();
        let all = Providers::resolve(&Config::default(), &profiles).unwrap();
        let sees = |p: &str, m: &str| all.get(p).unwrap_or_else(|| panic!("{p}")).sees(m);
        for (p, m, want) in [
            ("deepseek", "deepseek-chat", false),
            ("deepseek", "deepseek-reasoner", false),
            ("dashscope", "qwen3-vl-plus", true),
            ("dashscope", "qwen-vl-max", true),
            ("dashscope", "qwen-plus", false),
            ("zhipu", "glm-4.6v", true),
            ("zhipu", "glm-4.7", false),
            ("moonshot", "kimi-k2-0905-preview", false),
            ("openai", "gpt-4o", true),
            ("vllm", "Qwen/Qwen2.5-VL-7B-Instruct", true),
            ("vllm", "deepseek-ai/DeepSeek-V3.2", false),
            ("ollama", "llava:13b", true),
        ] {
            assert_eq!(sees(p, m), Some(want), "{p}/{m}");
        }
        let mut config = Config::default();
        config.providers.insert("openai".into(), ProviderConfig { vision: Some(false), ..Default::default() });
        config.providers.insert("deepseek".into(), ProviderConfig { vision: Some(true), ..Default::default() });
        let over = Providers::resolve(&config, &profiles).unwrap();
        assert_eq!(over.get("openai").unwrap().sees("gpt-4o"), Some(false));
        assert_eq!(over.get("deepseek").unwrap().sees("deepseek-chat"), Some(true));
        // A profile that says nothing: unknown, images sent as before.
        let mut own = BTreeMap::new();
        own.insert("own".to_string(), Profile::parse("own", "name = \"own\"\nbase_url = \"http://x/v1\"\n").unwrap());
        let p = Providers::resolve(&Config::default(), &own).unwrap();
        assert_eq!(p.get("own").unwrap().sees("m"), None);
    }

    #[test]
    fn aliases_may_be_globs_exact_names_first_then_the_longest_glob() {
        let mut config = Config::default();
        config.providers.insert(
            "cheap".into(),
            ProviderConfig { base_url: Some("http://127.0.0.1:1/v1".into()), ..Default::default() },
        );
        config.providers.insert(
            "strong".into(),
            ProviderConfig { base_url: Some("http://127.0.0.1:2/v1".into()), ..Default::default() },
        );
        config.models.insert("claude-*".into(), "strong/big".into());
        config.models.insert("claude-*haiku*".into(), "cheap/small".into());
        config.models.insert("claude-opus-4-1".into(), "cheap/exact".into());
        let profiles = load_profiles(None).unwrap_or_default();
        let p = Providers::resolve(&config, &profiles).unwrap_or_else(|e| panic!("{e}"));
        let to = |m: &str| p.route(m).map(|r| format!("{}/{}", r.provider.name, r.model)).unwrap_or_default();
        assert_eq!(to("claude-sonnet-4-5-20250929"), "strong/big");
        assert_eq!(to("claude-haiku-4-5-20251001"), "cheap/small");
        assert_eq!(to("claude-3-5-haiku-latest"), "cheap/small");
        assert_eq!(to("claude-opus-4-1"), "cheap/exact");
        assert_eq!(to("strong/other"), "strong/other");
        assert_eq!(to("gpt-4o"), "");
    }
}
