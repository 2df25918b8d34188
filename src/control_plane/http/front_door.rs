//! The front door's decisions, free of I/O: which requests to the management API and the page
//! are refused before any handler runs (a foreign Host, a cross-origin write, a JSON endpoint
//! sent something else), and the session cookie's shape. The browser is the attacker here: any
//! page the operator visits can make it send a request.

use axum::http::{HeaderMap, Method, StatusCode, header};
use std::net::IpAddr;

/// What `--public-url` gives: the origin browsers see, and the Host they send with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    /// `https://cp.example` or `https://cp.example:8443`, without a trailing slash.
    pub origin: String,
    /// `cp.example` or `cp.example:8443`, as a browser's Host header names it.
    pub authority: String,
}

impl PublicUrl {
    /// An `http` or `https` URL with a host and nothing after it but `/`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let refused = |why: &str| {
            format!("--public-url {text:?}: {why}; give the URL browsers open, e.g. https://wsync.example.com")
        };
        let url = url::Url::parse(text).map_err(|e| refused(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refused("the scheme must be http or https"));
        }
        if !url.username().is_empty() || url.password().is_some() || url.query().is_some() || url.fragment().is_some() {
            return Err(refused("it may hold no user, query or fragment"));
        }
        if url.path() != "/" {
            return Err(refused("the control plane serves at the root of its host; the path must be empty"));
        }
        let host = url.host_str().ok_or_else(|| refused("it names no host"))?.to_ascii_lowercase();
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host,
        };
        Ok(Self { origin: format!("{}://{authority}", url.scheme()), authority })
    }
}

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "wsync_session";

/// What every answer carries: no framing, no sniffing, no inline script, no referrer to other
/// sites (same-origin keeps the Origin header that the front door reads).
pub const SECURITY_HEADERS: [(header::HeaderName, &str); 4] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::REFERRER_POLICY, "same-origin"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
];

/// What the front door checks against.
#[derive(Debug, Clone, Default)]
pub struct FrontDoor {
    /// `host[:port]` values a request's Host may name; empty accepts any. On loopback they are
    /// the loopback names, which is what stops DNS rebinding.
    pub allowed_hosts: Vec<String>,
    /// `https` when serving TLS, else `http`: the scheme of the page's own origin.
    pub scheme: &'static str,
    /// The origin browsers see (`--public-url`), when a proxy stands in front: the Origin a
    /// write must carry, whatever scheme the proxy spoke to the control plane.
    pub public_origin: Option<String>,
}

/// Which kind of route a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The JSON API: authenticated by a Bearer token, which no browser adds on its own.
    Api,
    /// The page and its forms: authenticated by the session cookie, which a browser does add.
    Page,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    UnexpectedHost,
    CrossOrigin,
    NotJson,
}

impl Refusal {
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::UnexpectedHost | Refusal::CrossOrigin => StatusCode::FORBIDDEN,
            Refusal::NotJson => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Refusal::UnexpectedHost => "this control plane does not answer to that Host (see --allowed-host)",
            Refusal::CrossOrigin => "cross-origin request refused",
            Refusal::NotJson => "send JSON, with Content-Type: application/json",
        }
    }
}

fn text<'a>(headers: &'a HeaderMap, name: &header::HeaderName) -> Option<&'a str> {
    headers.get(name)?.to_str().ok()
}

impl FrontDoor {
    /// Whether the page's origin is served over TLS, to the browser: its cookie is `Secure`.
    pub fn secure(&self) -> bool {
        self.public_origin.as_deref().map_or(self.scheme == "https", |origin| origin.starts_with("https://"))
    }

    /// Judge a request by its method, authority and headers, before authentication and before
    /// its body. `authority` is HTTP/2's `:authority`, when it came that way.
    pub fn judge(
        &self,
        route: Route,
        method: &Method,
        authority: Option<&str>,
        headers: &HeaderMap,
    ) -> Result<(), Refusal> {
        let host = authority.or_else(|| text(headers, &header::HOST)).map(str::to_ascii_lowercase);
        if !self.allowed_hosts.is_empty() && !host.as_ref().is_some_and(|h| self.allowed_hosts.contains(h)) {
            return Err(Refusal::UnexpectedHost);
        }
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return Ok(());
        }
        let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
        if fetch_site.is_some_and(|site| site != "same-origin" && site != "none") {
            return Err(Refusal::CrossOrigin);
        }
        match text(headers, &header::ORIGIN) {
            Some(origin) => {
                let own = match &self.public_origin {
                    Some(public) => Some(public.clone()),
                    None => host.map(|host| format!("{}://{host}", self.scheme)),
                };
                if own.is_none_or(|own| !origin.eq_ignore_ascii_case(&own)) {
                    return Err(Refusal::CrossOrigin);
                }
            }
            // A browser names the origin of every form it posts; a write that rides on the
            // cookie without one cannot show where it comes from.
            None if route == Route::Page && fetch_site.is_none() => return Err(Refusal::CrossOrigin),
            None => {}
        }
        if route == Route::Api && !is_json(text(headers, &header::CONTENT_TYPE)) {
            return Err(Refusal::NotJson);
        }
        Ok(())
    }
}

fn is_json(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The host a request names: HTTP/2's `:authority`, else its Host header.
pub fn request_host<'a>(uri: &'a axum::http::Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    uri.authority().map(|a| a.as_str()).or_else(|| text(headers, &header::HOST))
}

/// The value of cookie `name` in a Cookie header.
pub fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// The Set-Cookie value of a session: unreadable by scripts, never sent cross-site, over TLS
/// only when serving TLS. `max_age_seconds` 0 clears it.
pub fn session_cookie(value: &str, max_age_seconds: i64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}", max_age_seconds.max(0))
}

/// The cookie that names a sign-in in flight at the identity provider. `SameSite=Lax`, the
/// one cookie that is: the browser comes back from the provider's site by a top-level GET,
/// which carries Lax cookies and never Strict ones. It grants nothing: it only ties the
/// callback to the browser that started the sign-in. Over TLS it is a `__Host-` cookie (no
/// sibling host can plant one; that prefix wants `Path=/`); else its path is the sign-in's.
pub fn pending_sign_in_cookie(value: &str, max_age_seconds: i64, secure: bool) -> String {
    let attributes = if secure { "Path=/; Secure" } else { "Path=/sign-in/oidc" };
    format!(
        "{}={value}; {attributes}; HttpOnly; SameSite=Lax; Max-Age={}",
        pending_sign_in_cookie_name(secure),
        max_age_seconds.max(0)
    )
}

/// The pending sign-in cookie's name: `__Host-` prefixed over TLS.
pub fn pending_sign_in_cookie_name(secure: bool) -> &'static str {
    if secure { "__Host-wsync_sign_in" } else { "wsync_sign_in" }
}

/// Where to go after signing in: a path on this server, or `/`. Never `//elsewhere`.
pub fn local_path(next: &str) -> &str {
    let local = next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && next.chars().all(|c| !c.is_control() && c != '\\');
    if local { next } else { "/" }
}

/// The client a request is from: the connection's peer, or, when the peer is a proxy the
/// operator trusts (`--trusted-proxy`), the last address its `X-Forwarded-For` appended. A
/// header from anyone else is ignored: a client would name whatever address it liked.
pub fn client_ip(peer: Option<IpAddr>, headers: &HeaderMap, trusted_proxies: &[IpAddr]) -> Option<IpAddr> {
    let peer = peer?.to_canonical();
    if !is_trusted(peer, trusted_proxies) {
        return Some(peer);
    }
    let forwarded = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .next_back()
        .and_then(|last| last.trim().parse::<IpAddr>().ok());
    Some(forwarded.map_or(peer, |ip| ip.to_canonical()))
}

/// Whether `peer` is one of the proxies the operator trusts, an IPv4 peer on an IPv6 socket
/// (`::ffff:a.b.c.d`) included.
pub fn is_trusted(peer: IpAddr, trusted_proxies: &[IpAddr]) -> bool {
    let peer = peer.to_canonical();
    trusted_proxies.iter().any(|trusted| trusted.to_canonical() == peer)
}

/// What the per-address limits count a client under: its IPv4 address, or its IPv6 /64 (one
/// host is usually given a whole /64, and would otherwise be 2^64 clients).
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(std::net::Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

/// The Host values a server on `address` answers to by default: its loopback names when it
/// listens on loopback, none (any) otherwise.
pub fn loopback_hosts(address: std::net::SocketAddr) -> Vec<String> {
    if !address.ip().is_loopback() {
        return Vec::new();
    }
    let port = address.port();
    vec![format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(header::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
        }
        map
    }

    fn door() -> FrontDoor {
        FrontDoor {
            allowed_hosts: loopback_hosts("127.0.0.1:8080".parse().unwrap()),
            scheme: "http",
            public_origin: None,
        }
    }

    #[test]
    fn a_foreign_host_is_refused_even_for_reads() {
        let rebinding = headers(&[("host", "evil.example:8080")]);
        assert_eq!(door().judge(Route::Page, &Method::GET, None, &rebinding), Err(Refusal::UnexpectedHost));
        assert_eq!(door().judge(Route::Page, &Method::GET, None, &headers(&[("host", "LOCALHOST:8080")])), Ok(()));
        assert_eq!(door().judge(Route::Api, &Method::GET, None, &HeaderMap::new()), Err(Refusal::UnexpectedHost));
    }

    #[test]
    fn cross_origin_writes_are_refused_whatever_their_content_type() {
        for content_type in ["application/x-www-form-urlencoded", "text/plain", "application/json"] {
            let request = headers(&[
                ("host", "127.0.0.1:8080"),
                ("origin", "https://evil.example"),
                ("content-type", content_type),
            ]);
            assert_eq!(door().judge(Route::Api, &Method::POST, None, &request), Err(Refusal::CrossOrigin));
            assert_eq!(door().judge(Route::Page, &Method::POST, None, &request), Err(Refusal::CrossOrigin));
        }
        let null_origin = headers(&[("host", "127.0.0.1:8080"), ("origin", "null")]);
        assert_eq!(door().judge(Route::Page, &Method::POST, None, &null_origin), Err(Refusal::CrossOrigin));
        let cross_site = headers(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")]);
        assert_eq!(door().judge(Route::Api, &Method::PUT, None, &cross_site), Err(Refusal::CrossOrigin));
    }

    #[test]
    fn same_origin_writes_pass_and_the_api_takes_only_json() {
        let form = headers(&[("host", "localhost:8080"), ("origin", "http://localhost:8080")]);
        assert_eq!(door().judge(Route::Page, &Method::POST, None, &form), Ok(()));
        let cli = headers(&[("host", "127.0.0.1:8080"), ("content-type", "application/json; charset=utf-8")]);
        assert_eq!(door().judge(Route::Api, &Method::POST, None, &cli), Ok(()));
        let plain = headers(&[("host", "127.0.0.1:8080"), ("content-type", "text/plain")]);
        assert_eq!(door().judge(Route::Api, &Method::POST, None, &plain), Err(Refusal::NotJson));
        let no_origin = headers(&[("host", "127.0.0.1:8080")]);
        assert_eq!(door().judge(Route::Page, &Method::POST, None, &no_origin), Err(Refusal::CrossOrigin));
        let tls = FrontDoor { allowed_hosts: vec![], scheme: "https", public_origin: None };
        let over_tls = headers(&[("host", "cp.example"), ("origin", "https://cp.example")]);
        assert_eq!(tls.judge(Route::Page, &Method::POST, None, &over_tls), Ok(()));
        let downgraded = headers(&[("host", "cp.example"), ("origin", "http://cp.example")]);
        assert_eq!(tls.judge(Route::Page, &Method::POST, None, &downgraded), Err(Refusal::CrossOrigin));
    }

    /// Behind a proxy that terminates TLS the control plane speaks plain HTTP, but the browser's
    /// origin is the public URL's: its writes pass, a downgraded or foreign origin does not.
    #[test]
    fn behind_a_tls_proxy_the_public_origin_is_the_pages() {
        let public = PublicUrl::parse("https://CP.example:8443/").unwrap();
        assert_eq!(public, PublicUrl { origin: "https://cp.example:8443".into(), authority: "cp.example:8443".into() });
        assert_eq!(
            PublicUrl::parse("https://cp.example:443").unwrap().authority,
            "cp.example",
            "as a browser sends it"
        );
        let door = FrontDoor {
            allowed_hosts: vec![public.authority.clone()],
            scheme: "http",
            public_origin: Some(public.origin.clone()),
        };
        assert!(door.secure());
        let form = headers(&[("host", "cp.example:8443"), ("origin", "https://cp.example:8443")]);
        assert_eq!(door.judge(Route::Page, &Method::POST, None, &form), Ok(()));
        for origin in ["http://cp.example:8443", "https://evil.example"] {
            let request = headers(&[("host", "cp.example:8443"), ("origin", origin)]);
            assert_eq!(door.judge(Route::Page, &Method::POST, None, &request), Err(Refusal::CrossOrigin), "{origin}");
        }
        for bad in [
            "ftp://cp.example",
            "https://cp.example/wsync",
            "https://u:p@cp.example",
            "https://cp.example/?a=1",
            "cp.example",
        ] {
            assert!(PublicUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cookies_and_redirects() {
        let request = headers(&[("cookie", "a=1; wsync_session=abc"), ("cookie", "b=2")]);
        assert_eq!(cookie_value(&request, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie_value(&request, "b"), Some("2"));
        let cookie = session_cookie("abc", 60, true);
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.ends_with("; Secure"));
        assert!(!session_cookie("", 0, false).contains("Secure"));
        assert_eq!(local_path("/agents/a1"), "/agents/a1");
        for hostile in ["//evil.example", "https://evil.example", "/\\evil.example", "/a\r\nSet-Cookie: x=1", ""] {
            assert_eq!(local_path(hostile), "/", "{hostile:?}");
        }
        assert!(loopback_hosts("0.0.0.0:8080".parse().unwrap()).is_empty());
    }

    #[test]
    fn a_forwarded_address_is_believed_from_a_trusted_proxy_only() {
        let (proxy, client): (IpAddr, IpAddr) = ("10.0.0.9".parse().unwrap(), "203.0.113.7".parse().unwrap());
        let forged = headers(&[("x-forwarded-for", "198.51.100.1, 203.0.113.7")]);
        assert_eq!(client_ip(Some(proxy), &forged, &[proxy]), Some(client), "the proxy's own entry, the last");
        assert_eq!(client_ip(Some(client), &forged, &[proxy]), Some(client), "a client names no other address");
        assert_eq!(client_ip(Some(proxy), &headers(&[("x-forwarded-for", "junk")]), &[proxy]), Some(proxy));
        assert_eq!(client_ip(None, &forged, &[proxy]), None);
        let mapped: IpAddr = "::ffff:10.0.0.9".parse().unwrap();
        assert_eq!(client_ip(Some(mapped), &forged, &[proxy]), Some(client), "an IPv4 proxy on an IPv6 socket");
    }

    #[test]
    fn an_ipv6_host_is_one_client_per_64() {
        let (a, b): (IpAddr, IpAddr) = ("2001:db8:1:2::1".parse().unwrap(), "2001:db8:1:2:ffff::9".parse().unwrap());
        assert_eq!(address_key(a), address_key(b));
        assert_ne!(address_key(a), address_key("2001:db8:1:3::1".parse().unwrap()));
        assert_eq!(address_key("::ffff:192.0.2.1".parse().unwrap()), "192.0.2.1".parse::<IpAddr>().unwrap());
    }
}
