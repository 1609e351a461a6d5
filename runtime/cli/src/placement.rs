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

/// `n` nodes on `hosts` in blocks (the first host's ranks first, and so on), listening at
/// `base_port`, `base_port + 1`, ... on each host; every spare host offers as many slots as
/// a host runs nodes. `slots` gives how many nodes each host takes (a hostfile's `slots=`,
/// Slurm's tasks per node); empty, the nodes are spread evenly (`n / hosts`, rounded up).
pub fn on_hosts(
    n: usize,
    hosts: &[Host],
    slots: &[usize],
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
    let even = n.div_ceil(hosts.len()).max(1);
    let capacity: Vec<usize> = if slots.is_empty() {
        vec![even; hosts.len()]
    } else if slots.len() != hosts.len() {
        return Err(format!(
            "{} hosts but {} slot counts",
            hosts.len(),
            slots.len()
        ));
    } else {
        slots.to_vec()
    };
    let total: usize = capacity.iter().sum();
    if total < n {
        return Err(format!(
            "{n} nodes but the hosts have {total} slots: give fewer nodes or more slots"
        ));
    }
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
    let mut placed = Vec::with_capacity(n);
    for (host, &cap) in hosts.iter().zip(&capacity) {
        for i in 0..cap.min(n - placed.len()) {
            placed.push(slot(host, i)?);
        }
    }
    let per_host = capacity.iter().copied().max().unwrap_or(1).min(n).max(1);
    let spares = spare_hosts
        .iter()
        .flat_map(|h| (0..per_host).map(move |i| (h, i)))
        .map(|(h, i)| slot(h, i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Placement {
        slots: placed,
        spares,
        per_host,
    })
}

/// Parses a hostfile: one host per line, `NAME[=ADDRESS]`, optionally followed by
/// `slots=N` (Open MPI's form) or written `NAME:N` (MPICH's); `#` starts a comment. Returns
/// the hosts and, if any line gives slots, every host's (a line without takes one).
pub fn parse_hostfile(text: &str) -> Result<(Vec<Host>, Vec<usize>), String> {
    let mut specs = Vec::new();
    let mut slots = Vec::new();
    let mut any_slots = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        // MPICH's `NAME:N` only without an address (an IPv6 one holds colons).
        let (name, mut count) = match (first.contains('='), first.rsplit_once(':')) {
            (false, Some((name, n))) => (name, Some(parse_slots(n, i)?)),
            _ => (first, None),
        };
        for w in words {
            match w.strip_prefix("slots=") {
                Some(n) if count.is_none() => count = Some(parse_slots(n, i)?),
                _ => {
                    return Err(format!(
                        "line {}: `{w}`: expected `slots=N` once after the host",
                        i + 1
                    ))
                }
            }
        }
        any_slots |= count.is_some();
        slots.push(count.unwrap_or(1));
        specs.push(name.to_string());
    }
    if specs.is_empty() {
        return Err("names no host".into());
    }
    let hosts = parse_hosts(&specs.join(","))?;
    Ok((hosts, if any_slots { slots } else { Vec::new() }))
}

fn parse_slots(n: &str, line: usize) -> Result<usize, String> {
    match n.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "line {}: `{n}`: slots must be a positive number",
            line + 1
        )),
    }
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
        let p = on_hosts(3, &hosts, &[], &[host("s", "10.0.0.9")], 7000).unwrap();
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
        assert!(on_hosts(2, &hosts, &[], &hosts, 7000)
            .unwrap_err()
            .contains("both a host and a spare"));
        assert!(on_hosts(2, &hosts, &[], &[], u16::MAX)
            .unwrap_err()
            .contains("out of range"));
        assert!(on_hosts(2, &[], &[], &[], 7000).is_err());
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

    #[test]
    fn a_hostfile_gives_hosts_and_their_slots_in_open_mpi_or_mpich_form() {
        let (hosts, slots) =
            parse_hostfile("# the job's hosts\nh0=10.0.0.1 slots=3\n\nlocalhost:1 # one\n")
                .unwrap();
        assert_eq!(hosts[0], host("h0", "10.0.0.1"));
        assert_eq!(hosts[1].name, "localhost");
        assert_eq!(slots, [3, 1]);
        let (v6, _) = parse_hostfile("h2=fe80::1 slots=2").unwrap();
        assert_eq!(v6, [host("h2", "fe80::1")]);
        let (hosts, slots) = parse_hostfile("h0=10.0.0.1\nh1=10.0.0.2\n").unwrap();
        assert_eq!(hosts.len(), 2);
        assert!(slots.is_empty(), "no slots given: spread evenly");
        for (bad, why) in [
            ("", "names no host"),
            ("h0=10.0.0.1 slots=0", "positive"),
            ("h0=10.0.0.1 slots=x", "positive"),
            ("h0=10.0.0.1 cpus=2", "slots=N"),
            ("h0=10.0.0.1 slots=1 slots=2", "slots=N"),
            ("h0=10.0.0.1\nh0=10.0.0.2", "listed twice"),
        ] {
            let e = parse_hostfile(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn slots_place_ranks_host_by_host_and_too_few_slots_are_refused() {
        let hosts = [host("h0", "10.0.0.1"), host("h1", "10.0.0.2")];
        let p = on_hosts(4, &hosts, &[3, 2], &[], 7000).unwrap();
        let on: Vec<_> = p.slots.iter().map(|s| s.addr.to_string()).collect();
        assert_eq!(
            on,
            [
                "10.0.0.1:7000",
                "10.0.0.1:7001",
                "10.0.0.1:7002",
                "10.0.0.2:7000"
            ]
        );
        assert_eq!(p.per_host, 3);
        assert!(on_hosts(6, &hosts, &[3, 2], &[], 7000)
            .unwrap_err()
            .contains("5 slots"));
    }
}
