// The modelshim console: plain JS, no build. Everything recorded is shown
// through textContent (never as HTML), so a body cannot inject markup.
"use strict";

(function () {
  // The login page: send the visitor back where they were.
  const next = document.getElementById("next");
  if (next) {
    // After a wrong key the form is at /console/login: keep the default then.
    if (location.pathname.startsWith("/console") && location.pathname !== "/console/login") next.value = location.pathname + location.hash;
    return;
  }

  const COLORS = ["#7c9cff", "#3fb950", "#d29922", "#bc8cff", "#58a6ff", "#f778ba", "#56d4dd", "#f0883e"];
  const state = { requests: new Map(), replica: null, live: false, fresh: new Set(), detail: null, proxy: null };
  const app = document.getElementById("app");

  // ---- helpers -----------------------------------------------------------
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v);
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  function svg(tag, attrs, ...kids) {
    const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
    for (const kid of kids.flat()) if (kid) el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    return el;
  }
  const ms = (v) => (v === null || v === undefined ? "–" : v >= 10000 ? (v / 1000).toFixed(1) + " s" : v + " ms");
  const time = (t) => new Date(t).toLocaleTimeString([], { hour12: false });
  // Costs are decimal strings (nano-unit exact); shown to six places.
  const money = (c) => (c && c.amount ? Number(c.amount).toFixed(6) + " " + c.currency : "–");
  const tokens = (u) => (u && (u.total_tokens || u.prompt_tokens || u.completion_tokens) ? (u.prompt_tokens ?? "?") + " → " + (u.completion_tokens ?? "?") : "–");
  function statusBadge(r) {
    if (!r.done) return h("span", { class: "badge run", text: r.status ? r.status + " · live" : "running" });
    const s = r.status || 0;
    return h("span", { class: "badge " + (s >= 500 ? "bad" : s >= 400 ? "warn" : "ok"), text: String(s) });
  }
  function pretty(text) {
    if (!text) return "";
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return text; }
  }
  function prettyValue(v) {
    if (typeof v === "string") return pretty(v);
    return JSON.stringify(v, null, 2);
  }
  // The session's CSRF token (the page carries it): sent with every request
  // that changes something.
  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  const CSRF = csrfMeta ? csrfMeta.getAttribute("content") : "";
  async function api(path, opts) {
    const headers = { accept: "application/json" };
    if (opts && opts.method && opts.method !== "GET") headers["x-csrf-token"] = CSRF;
    const r = await fetch(path, Object.assign({ credentials: "same-origin", headers }, opts || {}));
    if (r.status === 401) { location.reload(); throw new Error("signed out"); }
    return r.json().then((j) => ({ status: r.status, body: j }));
  }
  function colorOf(name) {
    const names = [...new Set([...state.requests.values()].map((r) => r.provider || "unrouted"))].sort();
    const i = names.indexOf(name || "unrouted");
    return COLORS[(i < 0 ? 0 : i) % COLORS.length];
  }

  // ---- routing -------------------------------------------------------------
  function route() {
    const m = location.pathname.match(/^\/console\/requests\/([^/]+)$/);
    if (m) return { view: "detail", id: decodeURIComponent(m[1]) };
    if (location.hash === "#proxy") return { view: "proxy" };
    return { view: "list" };
  }
  function go(path) {
    history.pushState(null, "", path);
    render(true);
  }
  window.addEventListener("popstate", () => render(true));
  window.addEventListener("hashchange", () => render(true));

  // ---- header --------------------------------------------------------------
  function header() {
    const live = document.getElementById("live");
    live.className = "live " + (state.live ? "on" : "off");
    document.getElementById("live-text").textContent = state.live ? "live" : "reconnecting…";
    const r = state.replica;
    if (r) {
      document.getElementById("replica").textContent =
        "this replica: " + (r.host || "?") + " · pid " + r.pid + " · v" + r.version + (r.recording ? " · recording" : "");
    }
    const v = route().view;
    document.getElementById("tab-requests").className = v === "proxy" ? "" : "active";
    document.getElementById("tab-proxy").className = v === "proxy" ? "active" : "";
  }

  // ---- charts --------------------------------------------------------------
  const SPAN = 10 * 60 * 1000, BUCKETS = 40;
  function buckets() {
    const now = Date.now(), start = now - SPAN, size = SPAN / BUCKETS;
    const byProvider = new Map();
    for (const r of state.requests.values()) {
      if (r.at_ms < start) continue;
      const p = r.provider || "unrouted";
      if (!byProvider.has(p)) byProvider.set(p, Array.from({ length: BUCKETS }, () => ({ n: 0, ms: 0, done: 0 })));
      const b = byProvider.get(p)[Math.min(BUCKETS - 1, Math.floor((r.at_ms - start) / size))];
      b.n += 1;
      if (r.done && r.duration_ms !== null) { b.ms += r.duration_ms; b.done += 1; }
    }
    return { byProvider, start, size };
  }
  function chartFrame(title, maxY, unit, draw, legend) {
    const W = 600, H = 150, L = 36, B = 18, T = 8;
    const g = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": title });
    for (let i = 0; i <= 3; i++) {
      const y = T + ((H - B - T) * i) / 3;
      g.append(svg("line", { x1: L, x2: W, y1: y, y2: y, class: "axis", "stroke-dasharray": i === 3 ? "" : "2 4" }));
      g.append(svg("text", { x: L - 6, y: y + 3, "text-anchor": "end" }, fmtAxis(maxY * (1 - i / 3), unit)));
    }
    g.append(svg("text", { x: L, y: H - 4 }, "−10 min"));
    g.append(svg("text", { x: W, y: H - 4, "text-anchor": "end" }, "now"));
    draw(g, { W, H, L, B, T, x: (i) => L + ((W - L) * i) / BUCKETS, y: (v) => T + (H - B - T) * (1 - v / (maxY || 1)) });
    return h("div", { class: "panel chart" }, h("h3", { text: title }), g,
      h("div", { class: "legend" }, legend.map((p) => h("span", {}, h("i", { "data-color": colorOf(p) }), p))));
  }
  function fmtAxis(v, unit) {
    if (unit === "ms") return v >= 1000 ? (v / 1000).toFixed(1) + "s" : Math.round(v) + "ms";
    return String(Math.round(v * 10) / 10);
  }
  function charts() {
    const { byProvider } = buckets();
    const names = [...byProvider.keys()].sort();
    let maxN = 1, maxMs = 1;
    for (let i = 0; i < BUCKETS; i++) {
      let sum = 0;
      for (const p of names) {
        const b = byProvider.get(p)[i];
        sum += b.n;
        if (b.done) maxMs = Math.max(maxMs, b.ms / b.done);
      }
      maxN = Math.max(maxN, sum);
    }
    maxN = Math.ceil(maxN * 1.15); maxMs = maxMs * 1.15;
    const reqs = chartFrame("Requests per 15 s, by provider", maxN, "n", (g, c) => {
      const w = (c.W - c.L) / BUCKETS;
      for (let i = 0; i < BUCKETS; i++) {
        let acc = 0;
        for (const p of names) {
          const n = byProvider.get(p)[i].n;
          if (!n) continue;
          const y0 = c.y(acc), y1 = c.y(acc + n);
          g.append(svg("rect", { x: c.x(i) + 1, y: y1, width: Math.max(1, w - 2), height: Math.max(1, y0 - y1), rx: 2, fill: colorOf(p) },
            svg("title", {}, `${p}: ${n}`)));
          acc += n;
        }
      }
    }, names);
    const lat = chartFrame("Mean latency, by provider", maxMs, "ms", (g, c) => {
      const w = (c.W - c.L) / BUCKETS;
      for (const p of names) {
        const pts = [];
        byProvider.get(p).forEach((b, i) => { if (b.done) pts.push([c.x(i) + w / 2, c.y(b.ms / b.done), Math.round(b.ms / b.done)]); });
        if (pts.length > 1) g.append(svg("polyline", { points: pts.map((q) => q[0] + "," + q[1]).join(" "), fill: "none", stroke: colorOf(p), "stroke-width": 2, "stroke-linejoin": "round" }));
        for (const q of pts) g.append(svg("circle", { cx: q[0], cy: q[1], r: 3, fill: colorOf(p) }, svg("title", {}, `${p}: ${q[2]} ms`)));
      }
    }, names);
    return h("div", { class: "grid two" }, reqs, lat);
  }
  function paintLegends(root) {
    // Legend swatches take their colour through the CSSOM (no inline style attributes under the CSP).
    root.querySelectorAll("[data-color]").forEach((el) => { el.style.background = el.getAttribute("data-color"); });
  }

  // ---- the live list ---------------------------------------------------------
  function listView() {
    const rows = [...state.requests.values()].sort((a, b) => b.at_ms - a.at_ms);
    const done = rows.filter((r) => r.done);
    const errors = done.filter((r) => (r.status || 0) >= 400).length;
    const mean = done.length ? Math.round(done.reduce((s, r) => s + (r.duration_ms || 0), 0) / done.length) : null;
    const withTtft = rows.filter((r) => r.ttft_ms !== null);
    const ttft = withTtft.length ? Math.round(withTtft.reduce((s, r) => s + r.ttft_ms, 0) / withTtft.length) : null;
    const stat = (k, v) => h("div", { class: "panel stat" }, h("div", { class: "v", text: v }), h("div", { class: "k", text: k }));
    const table = h("table", { id: "requests" },
      h("thead", {}, h("tr", {},
        ["Time", "Request", "Key", "Front", "Model → route", "Status", "TTFT", "Duration", "Tokens", "Cost", "Tools", "Retries"].map((t, i) =>
          h("th", { class: i >= 6 ? "num" : "", text: t })))),
      h("tbody", {}, rows.map((r) => {
        const tr = h("tr", { "data-id": r.id, class: state.fresh.has(r.id) ? "fresh" : "", onclick: () => go("/console/requests/" + encodeURIComponent(r.id)) },
          h("td", { class: "muted", text: time(r.at_ms) }),
          h("td", { class: "mono" }, h("a", { href: "/console/requests/" + encodeURIComponent(r.id), text: r.id.length > 16 ? r.id.slice(0, 16) + "…" : r.id })),
          h("td", { text: r.key || "–" }),
          h("td", {}, h("span", { class: "badge front", text: r.front })),
          h("td", { class: "route" }, h("b", { text: r.model || r.path }), r.provider ? " → " + r.provider + "/" + (r.upstream_model || "") : ""),
          h("td", {}, statusBadge(r)),
          h("td", { class: "num", text: ms(r.ttft_ms) }),
          h("td", { class: "num", text: ms(r.duration_ms) }),
          h("td", { class: "num", text: tokens(r.usage) }),
          h("td", { class: "num", text: money(r.cost) }),
          h("td", { class: "num" }, String(r.tool_calls || 0), r.recovered ? h("span", { class: "pill", title: "tool calls recovered from text", text: "+" + r.recovered + " recovered" }) : null),
          h("td", { class: "num" }, String(r.retries || 0), r.fallbacks ? h("span", { class: "pill hot", text: r.fallbacks + " fallback" }) : null));
        return tr;
      })));
    state.fresh.clear();
    return h("div", {},
      h("div", { class: "stats" },
        stat("requests kept", String(rows.length)), stat("errors", String(errors)), stat("mean duration", ms(mean)), stat("mean TTFT", ms(ttft)),
        stat("open consoles", state.replica ? String(state.replica.watchers) : "–")),
      charts(),
      h("h2", {}, "Live requests ", h("span", { class: "muted", text: "— newest first; recorded while a console is open" })),
      h("div", { class: "panel" }, rows.length ? table : h("div", { class: "empty", text: "Waiting for requests… send one to this replica and it shows up here." })));
  }

  // ---- one request ------------------------------------------------------------
  let detailTimer = null, detailBusy = false;
  function loadDetail(id) {
    if (detailBusy) { clearTimeout(detailTimer); detailTimer = setTimeout(() => loadDetail(id), 200); return; }
    detailBusy = true;
    api("/console/api/requests/" + encodeURIComponent(id)).then(({ status, body }) => {
      state.detail = status === 200 ? body : { missing: true, id, message: body.error && body.error.message };
      if (route().view === "detail") render(true);
    }).catch(() => {}).finally(() => { detailBusy = false; });
  }
  let bodyTab = "client_request";
  function timelineView(d) {
    const items = [];
    const done = new Set(d.timeline.filter((e) => e.type === "tool_call").map((e) => e.id));
    for (const e of d.timeline) {
      if (e.type === "iteration") {
        items.push(h("div", { class: "tl iteration" }, h("div", { class: "panel card" },
          h("div", { class: "title" }, h("span", { class: "name", text: "Iteration " + e.iteration }),
            h("span", { class: "iter", text: "→ " + e.provider + "/" + e.model })),
          (e.skills_read && e.skills_read.length) || (e.tools_unlocked && e.tools_unlocked.length) ?
            h("div", { class: "sub chips" },
              (e.skills_read || []).map((s) => h("span", { class: "chip skill", title: "skill read", text: "skill: " + s })),
              (e.tools_unlocked || []).map((t) => h("span", { class: "chip unlocked", title: "tool unlocked by a skill", text: "unlocked: " + t }))) : null,
          e.server_tools && e.server_tools.length ? h("div", { class: "sub", text: "server tools: " + e.server_tools.join(", ") }) : null)));
      } else if (e.type === "tool_calls_started") {
        for (const c of e.calls) {
          if (done.has(c.id)) continue;
          items.push(h("div", { class: "tl running tool-call", "data-tool": c.tool }, h("div", { class: "panel card" },
            h("div", { class: "title" }, h("span", { class: "name", text: c.tool }), h("span", { class: "badge run", text: "running" })),
            h("div", { class: "io" }, h("div", {}, h("div", { class: "label", text: "arguments" }), h("pre", { class: "args", text: prettyValue(c.arguments) }))))));
        }
      } else if (e.type === "tool_call") {
        const bad = e.status !== "ok";
        items.push(h("div", { class: "tl tool-call" + (bad ? " error" : ""), "data-tool": e.tool }, h("div", { class: "panel card" },
          h("div", { class: "title" }, h("span", { class: "name", text: e.tool }),
            h("span", { class: "badge " + (bad ? "bad" : "ok"), text: e.status }),
            h("span", { class: "iter", text: "iteration " + e.iteration + " · " + e.duration_ms + " ms · " + e.id })),
          h("div", { class: "io" },
            h("div", {}, h("div", { class: "label", text: "arguments" }), h("pre", { class: "args", text: prettyValue(e.arguments) })),
            h("div", {}, h("div", { class: "label", text: "result" + (e.truncated ? " (cut)" : "") }), h("pre", { class: "result", text: pretty(e.result) }),
              (e.image_urls || []).map((u) => h("img", { src: u, alt: "image returned by " + e.tool })))))));
      } else if (e.type === "model_turn") {
        items.push(h("div", { class: "tl model-turn" + (e.final ? " final" : "") }, h("div", { class: "panel card" },
          h("div", { class: "title" }, h("span", { class: "name", text: e.final ? "Answer" : "Model" }),
            e.final ? h("span", { class: "badge ok", text: "final" }) : null,
            h("span", { class: "iter", text: "iteration " + e.iteration + (e.finish_reason ? " · " + e.finish_reason : "") })),
          e.text ? h("pre", { class: "said", text: e.text }) : null,
          (e.calls || []).length ? h("div", { class: "sub", text: "calls: " + e.calls.map((c) => c.tool).join(", ") }) : null)));
      } else if (e.type === "image_described") {
        items.push(h("div", { class: "tl model-turn" }, h("div", { class: "panel card" },
          h("div", { class: "title" }, h("span", { class: "name", text: "Image described" }),
            h("span", { class: "badge ok", text: e.cached ? "cached" : "described" }),
            h("span", { class: "iter", text: e.part + " · " + e.bridge + " · " + e.bytes + " bytes · " + e.duration_ms + " ms" })),
          h("pre", { class: "said", text: e.description }))));
      } else if (e.type === "loop_stopped") {
        items.push(h("div", { class: "tl stopped" }, h("div", { class: "panel card" },
          h("div", { class: "title" }, h("span", { class: "name", text: "Loop stopped" }), h("span", { class: "badge warn", text: e.reason })),
          h("div", { class: "sub", text: e.message }))));
      }
    }
    const last = d.timeline[d.timeline.length - 1];
    if (!d.done && last && last.type === "iteration") {
      items.push(h("div", { class: "tl running" }, h("div", { class: "panel card" },
        h("div", { class: "title" }, h("span", { class: "badge run", text: "waiting" }), h("span", { class: "iter", text: "iteration " + last.iteration + ": the model is answering…" })))));
    }
    return items.length ? h("div", { class: "timeline", id: "timeline" }, items)
      : h("div", { class: "panel empty", id: "timeline", text: "No agent loop or image description: this request took the plain path." });
  }
  function bodyBlock(b, what) {
    if (!b) return h("div", { class: "muted", text: "nothing recorded" });
    return h("div", {}, h("p", { class: "meta", text: what + " · " + b.bytes + " bytes" + (b.truncated ? " · cut at the cap" : "") }),
      h("pre", { class: "body", text: pretty(b.text) || "(empty)" }));
  }
  function bodiesView(d) {
    const tabs = [["client_request", "Client request"], ["upstream", "Upstream (" + d.upstream.length + ")"], ["client_response", "What the client got"]];
    let content;
    if (bodyTab === "upstream") {
      content = d.upstream.length ? d.upstream.map((x, i) => h("div", {},
        h("h4", { text: "#" + (i + 1) + " " + x.provider + " POST " + x.path + " · +" + x.at_ms + " ms · " + (x.status ? "HTTP " + x.status : "no status") }),
        h("div", { class: "grid two" }, bodyBlock(x.request, "sent (after rewrites)"), bodyBlock(x.response, "the upstream's raw answer"))))
        : h("div", { class: "muted", text: "No upstream call." });
    } else {
      content = bodyBlock(d[bodyTab], bodyTab === "client_request" ? "as the client sent it" : "as the client received it");
    }
    return h("div", { class: "panel bodies" },
      h("div", { class: "bar" }, tabs.map(([k, label]) => h("button", { class: k === bodyTab ? "active" : "", "data-tab": k, onclick: () => { bodyTab = k; render(true); } }, label))),
      h("div", { class: "content", id: "body-" + bodyTab }, content));
  }
  function detailView(id) {
    const d = state.detail;
    if (!d || d.id !== id) { loadDetail(id); return h("div", { class: "empty", text: "Loading " + id + "…" }); }
    if (d.missing) return h("div", { class: "panel empty" }, h("p", { text: d.message || "Not found." }), h("a", { href: "/console", text: "← all requests" }));
    const kv = (k, v) => h("div", {}, h("div", { class: "k", text: k }), h("div", { class: "v" }, v));
    const skills = new Set(), unlocked = new Set();
    for (const e of d.timeline) if (e.type === "iteration") { (e.skills_read || []).forEach((s) => skills.add(s)); (e.tools_unlocked || []).forEach((t) => unlocked.add(t)); }
    return h("div", {},
      h("div", { class: "detail-head" }, h("a", { href: "/console", onclick: (ev) => { ev.preventDefault(); go("/console"); }, text: "← requests" }),
        h("h1", { id: "request-id", text: d.id }), statusBadge(d), h("span", { class: "badge front", text: d.front })),
      h("div", { class: "panel kv" },
        kv("time", new Date(d.at_ms).toLocaleString()), kv("key", d.key || "–"), kv("model", d.model || "–"),
        kv("route", d.provider ? d.provider + "/" + (d.upstream_model || "") : "–"), kv("TTFT", ms(d.ttft_ms)), kv("duration", ms(d.duration_ms)),
        kv("tokens", tokens(d.usage)), kv("cost", money(d.cost)), kv("server tool calls", String(d.tool_calls)), kv("recovered from text", String(d.recovered)),
        kv("retries", String(d.retries)), kv("fallbacks", String(d.fallbacks)), kv("upstream calls", String(d.upstream_calls)),
        kv("skills read", skills.size ? [...skills].join(", ") : "–"), kv("tools unlocked", unlocked.size ? [...unlocked].join(", ") : "–")),
      d.error ? h("div", { class: "panel card-p", id: "request-error" }, h("h3", {}, h("span", { class: "badge bad", text: "error" })), h("pre", { text: d.error })) : null,
      (d.retry_list.length || d.fallback_list.length) ? h("div", {}, h("h2", { text: "Retries and fallbacks" }), h("div", { class: "panel list" },
        d.retry_list.map((r) => h("div", { class: "item" }, h("span", { class: "badge warn", text: "retry" }), h("span", { class: "mono", text: r.provider }), h("span", { class: "muted", text: r.reason }), h("span", { class: "grow muted", text: r.error }))),
        d.fallback_list.map((f) => h("div", { class: "item" }, h("span", { class: "badge warn", text: "fallback" }), h("span", { class: "mono", text: f.from + " → " + f.to }), h("span", { class: "grow muted", text: f.error }))))) : null,
      h("h2", {}, "Agent loop ", h("span", { class: "muted", text: d.done ? "— every iteration and tool call" : "— live, while the request runs" })),
      timelineView(d),
      h("h2", { text: "Bodies" }),
      bodiesView(d));
  }

  // ---- the proxy ----------------------------------------------------------------
  let proxyTimer = null;
  function loadProxy() {
    api("/console/api/proxy").then(({ body }) => {
      state.proxy = body;
      state.replica = body.replica || state.replica;
      if (route().view === "proxy") render(true);
    }).catch(() => {});
  }
  function proxyView() {
    const p = state.proxy;
    if (!p) { loadProxy(); return h("div", { class: "empty", text: "Loading…" }); }
    const row = (k, v, cls) => h("div", { class: "row" }, h("span", { text: k }), h("span", { class: cls || "", text: v }));
    const providers = h("div", { class: "grid cards", id: "providers" }, p.providers.map((x) => h("div", { class: "panel card-p provider", "data-name": x.name },
      h("h3", {}, h("i", { "data-color": colorOf(x.name), class: "swatch" }), x.name),
      row("circuit", x.circuit.replace("_", "-"), "circuit-" + x.circuit), row("failures counted", String(x.failures)),
      row("requests", String(x.requests)), row("error rate", (x.error_rate * 100).toFixed(1) + " %", x.error_rate > 0.05 ? "circuit-open" : ""),
      row("mean latency", x.mean_latency_ms === null ? "–" : ms(x.mean_latency_ms)),
      ...(x.keys && x.keys.length > 1 ? x.keys.map((k) => row("key #" + k.position,
        k.state === "healthy" ? "healthy · " + k.used + " used" : k.state.replace("_", " ") + " · " + k.rest_secs + " s left",
        k.state === "healthy" ? "" : "circuit-open")) : []),
      h("div", { class: "note mono", text: x.base_url }))));
    const mcp = p.mcp.length ? h("div", { class: "panel list", id: "mcp" }, p.mcp.map((m) => h("div", { class: "item" },
      h("b", { class: "health-" + m.health, text: "● " + m.health }), h("span", { class: "mono", text: m.name }),
      h("span", { class: "grow muted", text: (m.tools.length ? m.tools.join(", ") : "no tools listed") + (m.error ? " — " + m.error : "") }),
      h("span", { class: "muted mono", text: m.target })))) : h("div", { class: "panel empty", text: "No MCP servers configured." });
    let skills;
    if (!p.skills) skills = h("div", { class: "panel empty", text: "Skills are not enabled." });
    else {
      const btn = h("button", { id: "reload-skills", onclick: () => {
        btn.disabled = true; btn.textContent = "Reloading…";
        api("/console/api/skills/reload", { method: "POST" }).then(() => loadProxy()).finally(() => { btn.disabled = false; btn.textContent = "Reload skills"; });
      } }, "Reload skills");
      skills = h("div", { class: "panel", id: "skills" },
        h("div", { class: "list" }, h("div", { class: "item" }, h("span", { class: "grow muted", text: p.skills.loaded + " loaded · " + p.skills.invalid + " invalid · generation " + p.skills.generation }), btn),
          p.skills.skills.map((s) => h("div", { class: "item" },
            h("span", { class: "badge " + (s.status === "ok" ? "ok" : s.status === "invalid" ? "bad" : "warn"), text: s.status }),
            h("span", { class: "mono", text: s.name }), h("span", { class: "grow muted", text: s.why || s.description || "" }),
            h("span", { class: "muted mono", text: s.path })))));
    }
    const tools = p.server_tools.length ? h("div", { class: "panel list" }, p.server_tools.map((t) => h("div", { class: "item" },
      h("span", { class: "mono", text: t.name }), h("span", { class: "grow muted", text: t.description || "" })))) : h("div", { class: "panel empty", text: "No server-side tools." });
    const errors = p.errors.length ? h("div", { class: "panel list", id: "errors" }, p.errors.map((e) => h("div", { class: "item" },
      statusBadge(e), h("span", { class: "muted", text: time(e.at_ms) }),
      h("a", { class: "mono", href: "/console/requests/" + encodeURIComponent(e.id), text: e.id }),
      h("span", { class: "grow", text: e.error })))) : h("div", { class: "panel empty", text: "No errors among the requests kept." });
    const cache = p.cache && p.cache.length ? h("div", { class: "panel list", id: "cache" }, p.cache.map((c) => h("div", { class: "item" },
      h("span", { class: "mono", text: c.key }), h("span", { class: "mono grow", text: c.provider + "/" + c.model }),
      h("b", { text: (c.hit_share * 100).toFixed(1) + " %" }),
      h("span", { class: "muted", text: c.cached_input_tokens + " of " + c.input_tokens + " input tokens cached" })))) : h("div", { class: "panel empty", text: "No input tokens counted yet." });
    return h("div", {},
      h("h2", {}, "Providers ", h("span", { class: "muted", text: "— circuit state now; requests, error rate and latency since this replica started" })), providers,
      charts(),
      h("h2", {}, "Prompt cache ", h("span", { class: "muted", text: "— the share of input tokens the vendor served from its cache, per proxy key and model, since this replica started" })), cache,
      h("h2", { text: "MCP servers" }), mcp,
      h("h2", { text: "Skills" }), skills,
      h("h2", { text: "Server-side tools" }), tools,
      h("h2", {}, "Recent errors ", h("span", { class: "muted", text: "— among the requests kept" })), errors);
  }

  // ---- rendering ------------------------------------------------------------------
  let pending = false;
  function render(now) {
    if (!now) { if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; render(true); }); } return; }
    header();
    const r = route();
    const scroll = window.scrollY;
    let view;
    if (r.view === "detail") view = detailView(r.id);
    else if (r.view === "proxy") view = proxyView();
    else view = listView();
    app.replaceChildren(view);
    paintLegends(app);
    window.scrollTo(0, scroll);
  }

  // ---- data -------------------------------------------------------------------------
  function upsert(r) {
    if (!state.requests.has(r.id)) state.fresh.add(r.id);
    state.requests.set(r.id, r);
    const cur = route();
    if (cur.view === "detail" && cur.id === r.id) loadDetail(r.id);
    else render(false);
  }
  function connect() {
    const es = new EventSource("/console/events");
    es.onopen = () => { state.live = true; header(); };
    es.onerror = () => { state.live = false; header(); };
    es.onmessage = (ev) => {
      let m;
      try { m = JSON.parse(ev.data); } catch (_) { return; }
      if (m.type === "hello") { state.replica = m.replica; state.live = true; refresh(); }
      else if (m.type === "request") upsert(m.request);
      else if (m.type === "lagged") refresh();
    };
  }
  function refresh() {
    api("/console/api/requests").then(({ body }) => {
      for (const r of body.requests) state.requests.set(r.id, r);
      state.replica = body.replica;
      render(false);
    }).catch(() => {});
  }
  // Links inside the app stay in the app.
  document.addEventListener("click", (ev) => {
    const a = ev.target.closest && ev.target.closest("a[href^='/console/requests/']");
    if (a && !ev.metaKey && !ev.ctrlKey) { ev.preventDefault(); ev.stopPropagation(); go(a.getAttribute("href")); }
  }, true);
  setInterval(() => { if (route().view === "proxy") loadProxy(); else if (route().view === "list") render(false); }, 5000);
  render(true);
  connect();
})();
