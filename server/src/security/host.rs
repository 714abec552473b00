//! Which `Host` names the server answers to. DNS rebinding points a name
//! the attacker controls at 127.0.0.1 (or a LAN address), so that a page
//! from that name can read the server's answers as same-origin; the
//! browser still sends the attacker's name as `Host`, and refusing names
//! the server was not told about defeats it. IP literals are always
//! accepted (a page can only have an IP origin if it came from that
//! address), so is `localhost` (no DNS answer can change what it means),
//! and so are the name given to `--host` and each `--allowed-host`.

use std::net::IpAddr;

#[derive(Debug, Clone)]
pub struct HostPolicy {
    /// Lower-case names, without a trailing dot.
    names: Vec<String>,
    /// `--allowed-host '*'`: the check is off.
    any: bool,
}

impl HostPolicy {
    /// `bind` is `--host`; `extra` are the `--allowed-host` values.
    pub fn new(bind: &str, extra: &[String]) -> Result<HostPolicy, String> {
        let mut names = vec![];
        let mut any = false;
        for e in extra {
            let n = normalize(e);
            if n == "*" {
                any = true;
            } else if n.is_empty() || n.contains(['/', ' ', ':']) {
                return Err(format!(
                    "--allowed-host {e:?}: give a host name without scheme, port or path (e.g. --allowed-host mybox.local), or '*' to answer to any name"
                ));
            } else {
                names.push(n);
            }
        }
        let b = normalize(bind);
        if b.parse::<IpAddr>().is_err() && !b.is_empty() {
            names.push(b);
        }
        Ok(HostPolicy { names, any })
    }

    /// Whether a request's `Host` (with or without its port) is ours.
    pub fn allows(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        let name = normalize(name_of(host));
        if name.parse::<IpAddr>().is_ok() {
            return true;
        }
        name == "localhost" || name.ends_with(".localhost") || self.names.contains(&name)
    }
}

/// The name part of `name[:port]` or `[v6][:port]`, brackets dropped.
pub fn name_of(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

fn normalize(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(bind: &str, extra: &[&str]) -> HostPolicy {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        HostPolicy::new(bind, &extra).expect("valid flags")
    }

    #[test]
    fn addresses_and_localhost_pass() {
        let p = policy("127.0.0.1", &[]);
        for h in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "[::1]:8080",
            "[::1]",
            "192.168.1.20:8080",
            "localhost:8080",
            "LOCALHOST.",
            "app.localhost:8080",
        ] {
            assert!(p.allows(h), "{h}");
        }
    }

    #[test]
    fn rebinding_names_are_refused() {
        let p = policy("0.0.0.0", &["mybox.lan"]);
        for h in [
            "evil.example:8080",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io:8080",
            "mybox.lan.evil.example",
            "",
        ] {
            assert!(!p.allows(h), "{h}");
        }
        assert!(p.allows("MyBox.lan:8080"));
        assert!(p.allows("mybox.lan."));
    }

    #[test]
    fn the_bound_name_and_star() {
        assert!(policy("phone.local", &[]).allows("phone.local:8080"));
        assert!(policy("127.0.0.1", &["*"]).allows("anything.example"));
    }

    #[test]
    fn malformed_allowed_hosts_fail_at_start() {
        for bad in ["http://a.lan", "a.lan:8080", "", "a lan"] {
            assert!(
                HostPolicy::new("127.0.0.1", &[bad.to_string()]).is_err(),
                "{bad}"
            );
        }
    }
}
