//! Where the launcher (`lazarus run`) puts its nodes. On this host: loopback addresses,
//! free ports, and spare slots as extra ports. On a list of hosts (`--hosts`): ranks in
//! blocks, one port per node of a host, and whole spare hosts (`--spare-hosts`) for
//! restarted nodes, as a cluster keeps spare nodes in an allocation. And how a node's
//! process is started on its host: directly, or through a remote command (`--remote`,
//! such as `ip netns exec {host}` or `ssh {host}`) that passes the environment on.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// A host nodes can run on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// Its name, as the remote command knows it.
    pub name: String,
    /// The address its nodes listen at.
    pub ip: IpAddr,
}

/// Parses `NAME[=ADDRESS],...`. A name without an address is resolved.
pub fn parse_hosts(spec: &str) -> Result<Vec<Host>, String> {
    let hosts: Vec<Host> = spec
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (name, ip) = match item.split_once('=') {
                Some((name, addr)) => (
                    name.trim(),
                    addr.trim()
                        .parse::<IpAddr>()
                        .map_err(|_| format!("`{item}`: `{addr}` is not an IP address"))?,
                ),
                None => (
                    item,
                    (item, 0)
                        .to_socket_addrs()
                        .ok()
                        .and_then(|mut a| a.next())
                        .map(|a| a.ip())
                        .ok_or_else(|| {
                            format!("`{item}`: cannot resolve it (give NAME=ADDRESS)")
                        })?,
                ),
            };
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(format!("`{item}`: expected NAME or NAME=ADDRESS"));
            }
            Ok(Host {
                name: name.to_string(),
                ip,
            })
        })
        .collect::<Result<_, String>>()?;
    let mut names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("host `{}` is listed twice", w[0]));
    }
    Ok(hosts)
}

/// A place a node listens at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The host it is on; `None`: this host, the process started directly.
    pub host: Option<String>,
    /// The address and port it listens at.
    pub addr: SocketAddr,
}

/// Slots for the nodes of a run (index: rank) and its spare slots, in the order they are
/// used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Where each rank starts.
    pub slots: Vec<Slot>,
    /// Where replacements start, next first.
    pub spares: Vec<Slot>,
    /// Nodes per host (the most any host runs).
    pub per_host: usize,
}

/// `n` nodes and `spares` spare slots on this host, at the loopback `ports` (`n + spares`
/// of them).
pub fn on_this_host(n: usize, ports: &[u16]) -> Placement {
    let mut slots: Vec<Slot> = ports
        .iter()
        .map(|&p| Slot {
            host: None,
            addr: SocketAddr::from(([127, 0, 0, 1], p)),
        })
        .collect();
    let spares = slots.split_off(n.min(slots.len()));
    Placement {
        slots,
        spares,
        per_host: n,
    }
}

/// `n` nodes on `hosts` in blocks (the first `per_host` ranks on the first host, and so
/// on), listening at `base_port`, `base_port + 1`, ... on each host; every spare host
/// offers as many slots as a host runs nodes.
pub fn on_hosts(
    n: usize,
    hosts: &[Host],
    spare_hosts: &[Host],
    base_port: u16,
) -> Result<Placement, String> {
    if hosts.is_empty() {
        return Err("no hosts to run on".into());
    }
    if let Some(h) = spare_hosts
        .iter()
        .find(|s| hosts.iter().any(|h| h.name == s.name))
    {
        return Err(format!("host `{}` is both a host and a spare", h.name));
    }
    let per_host = n.div_ceil(hosts.len()).max(1);
    let port = |i: usize| {
        u16::try_from(usize::from(base_port) + i)
            .map_err(|_| format!("port {base_port} + {i} is out of range"))
    };
    let slot = |host: &Host, i: usize| -> Result<Slot, String> {
        Ok(Slot {
            host: Some(host.name.clone()),
            addr: SocketAddr::new(host.ip, port(i)?),
        })
    };
    let slots = (0..n)
        .map(|rank| slot(&hosts[rank / per_host], rank % per_host))
        .collect::<Result<Vec<_>, _>>()?;
    let spares = spare_hosts
        .iter()
        .flat_map(|h| (0..per_host).map(move |i| (h, i)))
        .map(|(h, i)| slot(h, i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Placement {
        slots,
        spares,
        per_host,
    })
}

/// The words that start `program` on `host` through the `remote` command template
/// (`{host}` replaced by the host's name; without `{host}` the name is appended). Without
/// a host or a template, `program` itself.
pub fn command_words(remote: Option<&str>, host: Option<&str>, program: &[String]) -> Vec<String> {
    let mut words = Vec::new();
    if let (Some(remote), Some(host)) = (remote, host) {
        let mut named = false;
        for w in remote.split_whitespace() {
            named |= w.contains("{host}");
            words.push(w.replace("{host}", host));
        }
        if !named {
            words.push(host.to_string());
        }
    }
    words.extend(program.iter().cloned());
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, ip: &str) -> Host {
        Host {
            name: name.into(),
            ip: ip.parse().unwrap(),
        }
    }

    #[test]
    fn hosts_parse_with_addresses_and_bad_ones_say_why() {
        assert_eq!(
            parse_hosts("a=10.0.0.1, b=10.0.0.2").unwrap(),
            vec![host("a", "10.0.0.1"), host("b", "10.0.0.2")]
        );
        assert_eq!(parse_hosts("localhost").unwrap()[0].name, "localhost");
        assert!(parse_hosts("a=10.0.0.300")
            .unwrap_err()
            .contains("not an IP address"));
        assert!(parse_hosts("a=10.0.0.1,a=10.0.0.2")
            .unwrap_err()
            .contains("listed twice"));
        assert!(parse_hosts("no-such-host.invalid")
            .unwrap_err()
            .contains("cannot resolve"));
    }

    #[test]
    fn ranks_fill_hosts_in_blocks_and_spare_hosts_offer_a_hosts_worth_of_slots() {
        let hosts = [host("h0", "10.0.0.1"), host("h1", "10.0.0.2")];
        let p = on_hosts(3, &hosts, &[host("s", "10.0.0.9")], 7000).unwrap();
        let at = |s: &Slot| (s.host.clone().unwrap(), s.addr.to_string());
        assert_eq!(p.per_host, 2);
        assert_eq!(
            p.slots.iter().map(at).collect::<Vec<_>>(),
            [
                ("h0".to_string(), "10.0.0.1:7000".to_string()),
                ("h0".into(), "10.0.0.1:7001".into()),
                ("h1".into(), "10.0.0.2:7000".into()),
            ]
        );
        assert_eq!(
            p.spares.iter().map(at).collect::<Vec<_>>(),
            [
                ("s".to_string(), "10.0.0.9:7000".to_string()),
                ("s".into(), "10.0.0.9:7001".into()),
            ]
        );
    }

    #[test]
    fn a_host_cannot_be_its_own_spare_and_ports_must_exist() {
        let hosts = [host("h0", "10.0.0.1")];
        assert!(on_hosts(2, &hosts, &hosts, 7000)
            .unwrap_err()
            .contains("both a host and a spare"));
        assert!(on_hosts(2, &hosts, &[], u16::MAX)
            .unwrap_err()
            .contains("out of range"));
        assert!(on_hosts(2, &[], &[], 7000).is_err());
    }

    #[test]
    fn on_this_host_the_ports_after_the_nodes_are_spares() {
        let p = on_this_host(2, &[4000, 4001, 4002]);
        assert_eq!(p.slots.len(), 2);
        assert_eq!(p.spares[0].addr.to_string(), "127.0.0.1:4002");
        assert!(p.slots.iter().all(|s| s.host.is_none()));
    }

    #[test]
    fn a_remote_template_names_the_host_where_it_says_or_at_its_end() {
        let app = ["app".to_string(), "--n".into(), "8".into()];
        assert_eq!(
            command_words(Some("ip netns exec {host}"), Some("h1"), &app),
            ["ip", "netns", "exec", "h1", "app", "--n", "8"]
        );
        assert_eq!(
            command_words(Some("ssh"), Some("h1"), &app),
            ["ssh", "h1", "app", "--n", "8"]
        );
        assert_eq!(command_words(Some("ssh"), None, &app), app);
        assert_eq!(command_words(None, Some("h1"), &app), app);
    }
}
