//! A guarded HTTP GET, for URLs a model or a client chose (the built-in
//! `http_fetch`, the images `core::vision` describes).
//!
//! Guards: http(s) only; the host must be on `allow_hosts` when that list is
//! set; every address the host resolves to must be public (no loopback,
//! private, link-local, CGNAT, multicast, documentation or reserved ranges)
//! unless `allow_private`; the connection is pinned to the addresses that
//! were checked (no DNS rebinding between check and connect, and no
//! `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY` from the environment, which would
//! resolve the name again); redirects are followed by hand (at most 5), each
//! hop checked again; the body is cut at `max_bytes`. The caller times the
//! whole fetch out.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;

use crate::tools::config::HttpFetchConfig;

const MAX_REDIRECTS: usize = 5;

/// What a guarded GET read.
pub struct Fetched {
    pub status: u16,
    /// The URL that answered (after redirects).
    pub url: Url,
    /// The `Content-Type` as sent (`application/octet-stream` when none).
    pub mime: String,
    pub body: Vec<u8>,
    /// The body was longer than `max_bytes` and was cut there.
    pub truncated: bool,
}

/// Checks a URL against the guards; returns the addresses to connect to.
async fn admit(config: &HttpFetchConfig, url: &Url) -> Result<Vec<SocketAddr>, String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("only http and https URLs can be fetched, not {}", url.scheme()));
    }
    let host = url.host_str().ok_or("the URL has no host")?.trim_start_matches('[').trim_end_matches(']');
    if !config.allow_hosts.is_empty() && !config.allow_hosts.iter().any(|p| host_matches(p, host)) {
        return Err(format!("the host {host} is not on the allow-list"));
    }
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => {
            tokio::net::lookup_host((host, port)).await.map_err(|e| format!("cannot resolve {host}: {e}"))?.collect()
        }
    };
    if addrs.is_empty() {
        return Err(format!("{host} resolves to no address"));
    }
    if !config.allow_private
        && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip()))
    {
        return Err(format!("{host} resolves to the non-public address {}, which is not allowed", bad.ip()));
    }
    Ok(addrs)
}

/// GET `start` under the guards (see the module's comment).
pub async fn get(config: &HttpFetchConfig, start: Url) -> Result<Fetched, String> {
    crate::provider::upstream::install_crypto_provider();
    let mut url = start;
    for _ in 0..=MAX_REDIRECTS {
        let addrs = admit(config, &url).await?;
        // No proxy from the environment: a proxy would resolve the name
        // again, so the connection goes only to the addresses checked.
        let mut b = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy();
        if let Some(host) = url.host_str()
            && host.parse::<IpAddr>().is_err()
        {
            b = b.resolve_to_addrs(host, &addrs);
        }
        let client = b.build().map_err(|e| e.to_string())?;
        let mut resp = client
            .get(url.clone())
            .header("user-agent", concat!("modelshim/", env!("CARGO_PKG_VERSION")))
            .send()
            .await
            .map_err(|e| format!("fetch failed: {e}"))?;
        let status = resp.status();
        if status.is_redirection()
            && let Some(loc) = resp.headers().get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok())
        {
            url = url.join(loc).map_err(|e| format!("bad redirect {loc:?}: {e}"))?;
            continue;
        }
        let mime = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_string();
        let mut body = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = resp.chunk().await.map_err(|e| format!("reading the body failed: {e}"))? {
            let room = config.max_bytes.saturating_sub(body.len());
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        return Ok(Fetched { status: status.as_u16(), url, mime, body, truncated });
    }
    Err(format!("more than {MAX_REDIRECTS} redirects"))
}

/// `example.com` matches itself; `*.example.com` matches its subdomains.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    let (p, h) = (pattern.to_ascii_lowercase(), host.to_ascii_lowercase());
    match p.strip_prefix("*.") {
        Some(suffix) => h.len() > suffix.len() && h.ends_with(&format!(".{suffix}")),
        None => p == h,
    }
}

/// Whether an address is on the public internet. An IPv6 address that
/// embeds an IPv4 address (mapped, compatible, translated, NAT64, 6to4,
/// Teredo) is judged by that IPv4 address (both of Teredo's); other IPv6
/// addresses must be global unicast (2000::/3) outside the special ranges.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn v4(hi: u16, lo: u16) -> Ipv4Addr {
    Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))
}

fn is_public_v6(v6: Ipv6Addr) -> bool {
    let s = v6.segments();
    if v6.is_unspecified() || v6.is_loopback() {
        return false;
    }
    // ::a.b.c.d (IPv4-compatible), ::ffff:a.b.c.d (mapped),
    // ::ffff:0:a.b.c.d (translated), 64:ff9b::a.b.c.d (NAT64).
    let compatible = s[..6] == [0; 6];
    let mapped = s[..5] == [0; 5] && s[5] == 0xffff;
    let translated = s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0;
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4];
    if compatible || mapped || translated || nat64 {
        return is_public_v4(v4(s[6], s[7]));
    }
    if s[0] & 0xe000 != 0x2000 {
        // Outside global unicast: ULA, link-local, multicast, discard
        // (100::/64), local-use NAT64 (64:ff9b:1::/48, where the IPv4 can sit
        // anywhere), …
        return false;
    }
    match (s[0], s[1]) {
        // 6to4: 2002:AABB:CCDD::/48 carries a.b.c.d.
        (0x2002, _) => is_public_v4(v4(s[1], s[2])),
        // Teredo: the server's IPv4 in bits 32..64, the client's (XOR
        // 0xffffffff) in the last 32.
        (0x2001, 0) => is_public_v4(v4(s[2], s[3])) && is_public_v4(v4(!s[6], !s[7])),
        (0x2001, 0x0db8) => false,                         // documentation
        (0x2001, 0x0002) if s[2] == 0 => false,            // benchmarking 2001:2::/48
        (0x2001, x) if (0x10..0x30).contains(&x) => false, // ORCHID(v2) 2001:10::/28, 2001:20::/28
        (x, _) if x & 0xfff0 == 0x3ff0 => false,           // documentation 3fff::/20
        _ => true,
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || o[0] == 0
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // CGNAT 100.64/10
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF protocol assignments
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // benchmarking 198.18/15
        || o[0] >= 240)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_address_check() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "ff02::1",
            "100::1",
            "2001:db8::1",
            "3fff::1",
            "255.255.255.255",
        ] {
            assert!(!is_public(bad.parse().unwrap()), "{bad}");
        }
        for good in ["1.1.1.1", "93.184.216.34", "2606:4700::1111", "2a00:1450:4001::1"] {
            assert!(is_public(good.parse().unwrap()), "{good}");
        }
    }

    /// Every IPv6 form with an IPv4 address inside is judged by that address.
    #[test]
    fn embedded_ipv4_forms_are_judged_by_their_ipv4() {
        let forms: &[(&str, &str)] = &[
            ("IPv4-compatible", "::{}"),
            ("IPv4-mapped", "::ffff:{}"),
            ("IPv4-translated", "::ffff:0:{}"),
            ("NAT64", "64:ff9b::{}"),
        ];
        for (form, pattern) in forms {
            for private in ["127.0.0.1", "10.0.0.1", "169.254.169.254", "192.168.0.1", "100.64.0.1"] {
                let ip = pattern.replace("{}", private);
                assert!(!is_public(ip.parse().unwrap()), "{form} {ip}");
            }
            let ip = pattern.replace("{}", "1.1.1.1");
            assert!(is_public(ip.parse().unwrap()), "{form} {ip}");
        }
        // Local-use NAT64 (RFC 8215): never public, wherever the IPv4 sits.
        assert!(!is_public("64:ff9b:1::7f00:1".parse().unwrap()));
        assert!(!is_public("64:ff9b:1:101:101::".parse().unwrap()));
        // 6to4: 2002:AABB:CCDD:: embeds AA.BB.CC.DD.
        assert!(!is_public("2002:7f00:1::1".parse().unwrap()));
        assert!(!is_public("2002:a9fe:a9fe::".parse().unwrap()));
        assert!(!is_public("2002:c0a8:1::".parse().unwrap()));
        assert!(is_public("2002:101:101::1".parse().unwrap()));
        // Teredo 2001:0:SSSS:SSSS:flags:port:CCCC:CCCC, client XOR 0xffffffff.
        let teredo = |server: [u8; 4], client: [u8; 4]| {
            let (s, c) = (u32::from_be_bytes(server), !u32::from_be_bytes(client));
            let ip = Ipv6Addr::new(0x2001, 0, (s >> 16) as u16, s as u16, 0, 0xffff, (c >> 16) as u16, c as u16);
            is_public(IpAddr::V6(ip))
        };
        assert!(teredo([65, 54, 227, 120], [1, 1, 1, 1]));
        assert!(!teredo([65, 54, 227, 120], [127, 0, 0, 1]), "private client");
        assert!(!teredo([10, 0, 0, 1], [1, 1, 1, 1]), "private server");
        assert!(!is_public("2001:0:4136:e378:8000:63bf:80ff:fffe".parse().unwrap()), "client 127.0.0.1");
    }

    #[test]
    fn host_patterns() {
        assert!(host_matches("example.com", "Example.com"));
        assert!(!host_matches("example.com", "a.example.com"));
        assert!(host_matches("*.example.com", "a.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "badexample.com"));
    }
}
