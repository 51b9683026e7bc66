//! Hosts in network namespaces of their own, made by the test: each with its own address on a
//! bridge in 198.18.0.0/24 (the benchmarking range, in the order the hosts are named) and no
//! route anywhere else, removed (with whatever runs in them) when dropped. Where they cannot be
//! made, the test fails saying why.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use super::text;

pub struct Net {
    tag: String,
    hosts: Vec<String>,
    made: Vec<String>,
}

fn ip(args: &[&str]) -> Result<String, String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if o.status.success() {
        Ok(text(&o.stdout))
    } else {
        Err(format!("ip {}: {}", args.join(" "), text(&o.stderr).trim()))
    }
}

impl Net {
    /// A namespace per host of `hosts`, on one bridge.
    pub fn make(hosts: &[&str]) -> Result<Net, String> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "nxn{}{}",
            std::process::id() % 100_000,
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let mut n = Net {
            tag,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            made: Vec::new(),
        };
        let sw = n.ns("switch");
        ip(&["netns", "add", &sw])?;
        n.made.push(sw.clone());
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for (i, host) in hosts.iter().enumerate() {
            let ns = n.ns(host);
            ip(&["netns", "add", &ns])?;
            n.made.push(ns.clone());
            let port = format!("{}{i}", n.tag);
            ip(&[
                "link", "add", &port, "netns", &sw, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ])?;
            ip(&["-n", &sw, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &sw, "link", "set", &port, "up"])?;
            let addr = format!("{}/24", n.address(host));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            let routes = ip(&["-n", &ns, "route", "show"])?;
            if routes.contains("default") || routes.lines().count() != 1 {
                return Err(format!("{ns} has routes beyond its bridge: {routes}"));
            }
        }
        Ok(n)
    }

    /// `make`, or a failed test that says why.
    pub fn must(hosts: &[&str]) -> Net {
        Net::make(hosts).unwrap_or_else(|why| {
            panic!("network namespaces cannot be made here (root and iproute2 needed): {why}")
        })
    }

    pub fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.tag)
    }

    pub fn address(&self, host: &str) -> String {
        let i = self.hosts.iter().position(|h| h == host).unwrap();
        format!("198.18.0.{}", i + 1)
    }

    /// Send `sig` to every process of `host`.
    pub fn signal(&self, host: &str, sig: i32) {
        signal_all(&self.ns(host), sig);
    }
}

/// Send `sig` to every process of the namespace `ns`.
fn signal_all(ns: &str, sig: i32) {
    let pids = ip(&["netns", "pids", ns]).unwrap_or_default();
    for p in pids
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        // SAFETY: kill takes no pointers: a signal to a process of this test's namespaces.
        unsafe { libc::kill(p, sig) };
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.made.iter().rev() {
            signal_all(ns, libc::SIGKILL);
            signal_all(ns, libc::SIGCONT);
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
