//! The registry of text tool-call formats: one file per format, one line in
//! [`ALL`]. Order matters only where two formats share a marker or a start
//! byte: the engine offers the region to each in this order and the first
//! that accepts it wins, so parsers must dispatch on what follows the marker
//! (`<tool_call>` opens hermes JSON, Qwen3-Coder XML, GLM and Granite bodies).

use super::Format;

mod bare_json;
mod command_r7b;
mod deepseek_v3;
mod deepseek_v31;
mod deepseek_v32_dsml;
mod deepseek_v4_dsml;
mod ernie45;
mod functionary_v3_1;
mod functionary_v3_2;
mod functools;
mod gemma4;
mod gigachat3;
mod gigachat35;
mod glm45;
mod granite;
mod harmony;
mod hermes;
mod hunyuan_a13b;
mod hunyuan_v3;
mod inkling;
mod internlm2;
mod json_calls;
mod kimi_k2;
mod kimi_k3;
mod lfm2;
mod llama3_json;
mod markdown_json_fence;
mod minimax_m1;
mod minimax_m2;
mod minimax_m3;
mod mistral;
mod pythonic;
mod qwen3_coder_xml;
mod qwen_agent_fn;
mod react;
mod seed_oss;
mod step3;
mod xml;

/// Every format, in dispatch order.
pub static ALL: &[&dyn Format] = &[
    &hermes::Hermes,
    &ernie45::Ernie45,
    &qwen3_coder_xml::Qwen3CoderXml,
    &glm45::Glm45,
    &granite::Granite,
    &seed_oss::SeedOss,
    &functionary_v3_1::FunctionaryV31,
    &mistral::Mistral,
    &llama3_json::Llama3Json,
    &pythonic::Pythonic,
    &lfm2::Lfm2,
    &deepseek_v3::DeepseekV3,
    &deepseek_v31::DeepseekV31,
    &deepseek_v32_dsml::DeepseekV32Dsml,
    &deepseek_v4_dsml::DeepseekV4Dsml,
    &kimi_k2::KimiK2,
    &kimi_k3::KimiK3,
    &minimax_m1::MinimaxM1,
    &hunyuan_a13b::HunyuanA13b,
    &hunyuan_v3::HunyuanV3,
    &minimax_m2::MinimaxM2,
    &minimax_m3::MinimaxM3,
    &step3::Step3,
    &internlm2::Internlm2,
    &qwen_agent_fn::QwenAgentFn,
    &command_r7b::CommandR7b,
    &functools::Functools,
    &gemma4::Gemma4,
    &gigachat3::Gigachat3,
    &gigachat35::Gigachat35,
    &inkling::Inkling,
    &harmony::Harmony,
    &functionary_v3_2::FunctionaryV32,
    &markdown_json_fence::MarkdownJsonFence,
    &react::React,
    &bare_json::BareJson,
];

/// Other names a format answers to (model families that share its syntax).
static ALIASES: &[(&str, &str)] = &[
    ("qwen25", "hermes"),
    ("glm47", "glm45"),
    ("granite_20b_fc", "granite"),
    ("mistral_pre_v11", "mistral"),
    ("mistral_v11", "mistral"),
    ("jamba", "hunyuan_a13b"),
    ("xlam", "bare_json"),
    ("deepseek_v4", "deepseek_v4_dsml"),
    // HY-V4 (vLLM `hy_v4`) is HY-V3 without the `<tool_sep>` after the name.
    ("hunyuan_v4", "hunyuan_v3"),
    ("hy_v4", "hunyuan_v3"),
];

/// Looks a format up by name or alias.
pub fn by_name(name: &str) -> Option<&'static dyn Format> {
    let name = ALIASES.iter().find(|(a, _)| *a == name).map_or(name, |(_, n)| n);
    ALL.iter().copied().find(|f| f.name() == name)
}
