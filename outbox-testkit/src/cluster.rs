//! A RabbitMQ cluster of its own for one test: three nodes on loopback beside the shared server,
//! each with its own configuration (the machine's pins port 5672, so it is replaced, not
//! extended), node name, AMQP and distribution ports, and data, log and feature-flag folders owned
//! by the `rabbitmq` user; nodes 2 and 3 join node 1. Dropping the cluster stops every node and
//! removes its folders, whether the test passed or not.
//!
//! A node starts in about 15 s here; the nodes start at once, then join one by one. Tests that
//! use a cluster belong in a serial test binary of their own (they load the host), and are skipped
//! with a message by [`TestCluster::unavailable`] where RabbitMQ is not installed or the test does
//! not run as root (the nodes run as the `rabbitmq` user, which only root can switch to).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// RabbitMQ's own start script (the Debian wrapper in `/usr/sbin` switches users with a shell
/// command line that loses the environment's quoting).
const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const CTL: &str = "/usr/lib/rabbitmq/bin/rabbitmqctl";

/// One node of a [`TestCluster`].
#[derive(Debug)]
pub struct ClusterNode {
    name: String,
    amqp_port: u16,
    dist_port: u16,
    dir: PathBuf,
}

impl ClusterNode {
    /// The Erlang node name (`outbox-<suffix>-<n>@localhost`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's AMQP port on 127.0.0.1.
    pub fn amqp_port(&self) -> u16 {
        self.amqp_port
    }

    /// The node's folder (configuration, data, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The node's AMQP URL (guest, default vhost).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.amqp_port)
    }
}

/// A three-node RabbitMQ cluster started for one test (see the module's documentation).
#[derive(Debug)]
pub struct TestCluster {
    nodes: Vec<ClusterNode>,
    root: PathBuf,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn failed(what: &str, output: &std::process::Output) -> Error {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    Error::Cluster(format!("{what}: {} {}", stdout.trim(), stderr.trim()))
}

/// Runs a RabbitMQ command as the `rabbitmq` user with `env`.
fn as_rabbitmq(program: &str, args: &[&str], env: &[(String, String)]) -> Result<std::process::Output> {
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", "rabbitmq", "--", "env"]);
    for (k, v) in env {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.arg(program).args(args).stdin(Stdio::null());
    Ok(cmd.output()?)
}

impl TestCluster {
    /// Why a cluster cannot be started here, if it cannot: RabbitMQ not installed, or not root.
    pub fn unavailable() -> Option<String> {
        if !Path::new(SERVER).exists() {
            return Some(format!("{SERVER} is not installed"));
        }
        let uid =
            Command::new("id").arg("-u").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        if uid.as_deref() != Some("0") {
            return Some("the cluster's nodes run as the rabbitmq user: the test must run as root".to_owned());
        }
        None
    }

    /// Starts three nodes and clusters them, within `deadline`.
    ///
    /// # Errors
    /// [`Error::Cluster`] with RabbitMQ's own words if a node does not start or join; the nodes
    /// started so far are stopped and their folders removed.
    pub fn start(deadline: Duration) -> Result<Self> {
        let suffix = crate::unique_suffix().replace(['.', '_'], "-");
        let root = std::env::temp_dir().join(format!("outbox-cluster-{suffix}"));
        let mut cluster = Self { nodes: Vec::new(), root };
        for n in 1..=3 {
            let node = cluster.prepare(&suffix, n)?;
            cluster.nodes.push(node);
        }
        let status = Command::new("chown").arg("-R").arg("rabbitmq:rabbitmq").arg(&cluster.root).status()?;
        if !status.success() {
            return Err(Error::Cluster("cannot give the cluster's folders to the rabbitmq user".to_owned()));
        }
        for node in &cluster.nodes {
            let output = as_rabbitmq(SERVER, &["-detached"], &cluster.env(node))?;
            if !output.status.success() {
                return Err(failed(&format!("starting {}", node.name), &output));
            }
        }
        let until = Instant::now() + deadline;
        for node in &cluster.nodes {
            cluster.await_startup(node, until)?;
        }
        let first = cluster.nodes[0].name.clone();
        for node in &cluster.nodes[1..] {
            cluster.ctl(node, &["stop_app"])?;
            cluster.ctl(node, &["join_cluster", &first])?;
            cluster.ctl(node, &["start_app"])?;
        }
        Ok(cluster)
    }

    /// Writes node `n`'s configuration and folders.
    fn prepare(&self, suffix: &str, n: usize) -> Result<ClusterNode> {
        let dir = self.root.join(format!("node-{n}"));
        for sub in ["mnesia", "log"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let amqp_port = free_port()?;
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!("listeners.tcp.1 = 127.0.0.1:{amqp_port}\nloopback_users = none\n"),
        )?;
        std::fs::write(dir.join("enabled_plugins"), "[].\n")?;
        std::fs::write(dir.join("rabbitmq-env.conf"), "")?;
        let dist_port = free_port()?;
        Ok(ClusterNode { name: format!("outbox-{suffix}-{n}@localhost"), amqp_port, dist_port, dir })
    }

    /// The environment of `node`'s server and of the commands aimed at it.
    fn env(&self, node: &ClusterNode) -> Vec<(String, String)> {
        let d = |p: &str| node.dir.join(p).display().to_string();
        vec![
            ("HOME".to_owned(), "/var/lib/rabbitmq".to_owned()),
            ("RABBITMQ_CONF_ENV_FILE".to_owned(), d("rabbitmq-env.conf")),
            ("RABBITMQ_CONFIG_FILE".to_owned(), d("rabbitmq.conf")),
            ("RABBITMQ_ENABLED_PLUGINS_FILE".to_owned(), d("enabled_plugins")),
            ("RABBITMQ_NODENAME".to_owned(), node.name.clone()),
            ("RABBITMQ_DIST_PORT".to_owned(), node.dist_port.to_string()),
            ("RABBITMQ_MNESIA_BASE".to_owned(), d("mnesia")),
            ("RABBITMQ_LOG_BASE".to_owned(), d("log")),
            ("RABBITMQ_FEATURE_FLAGS_FILE".to_owned(), d("feature_flags")),
            ("RABBITMQ_PID_FILE".to_owned(), d("pid")),
            ("ERL_EPMD_ADDRESS".to_owned(), "127.0.0.1".to_owned()),
        ]
    }

    /// Runs `rabbitmqctl -n <node> args`.
    fn ctl(&self, node: &ClusterNode, args: &[&str]) -> Result<String> {
        let mut all = vec!["-n", node.name.as_str()];
        all.extend_from_slice(args);
        let output = as_rabbitmq(CTL, &all, &self.env(node))?;
        if !output.status.success() {
            return Err(failed(&format!("rabbitmqctl {} on {}", args.join(" "), node.name), &output));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Waits until `node` has booted. Right after `-detached` the node is not registered yet, and
    /// `await_startup` fails at once: it is asked again until `until`.
    fn await_startup(&self, node: &ClusterNode, until: Instant) -> Result<()> {
        loop {
            let left = until.saturating_duration_since(Instant::now()).as_secs().max(1).to_string();
            match self.ctl(node, &["await_startup", "--timeout", &left]) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= until => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    }

    /// The nodes, in the order they were started (node 1 first).
    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// Every node's URL, node 1 first.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(ClusterNode::url).collect()
    }

    /// Stops node `i` (0-based) as an operator would (`rabbitmqctl stop_app`): its connections drop
    /// and its replicas leave the majority.
    ///
    /// # Errors
    /// RabbitMQ's refusal.
    pub fn stop_node(&self, i: usize) -> Result<()> {
        self.ctl(&self.nodes[i], &["stop_app"]).map(drop)
    }

    /// Starts node `i` again after [`TestCluster::stop_node`].
    ///
    /// # Errors
    /// RabbitMQ's refusal.
    pub fn start_node(&self, i: usize) -> Result<()> {
        self.ctl(&self.nodes[i], &["start_app"]).map(drop)
    }

    /// How many client connections named `name` (the `connection_name` client property) are open
    /// on node `i` (0-based).
    ///
    /// # Errors
    /// RabbitMQ's refusal.
    pub fn clients_on(&self, i: usize, name: &str) -> Result<usize> {
        let node = &self.nodes[i];
        // Every node lists the whole cluster's connections; a connection's process id names its
        // node: `<outbox-…-1@localhost.1733.123.0>`.
        let listing = self.ctl(node, &["list_connections", "pid", "client_properties", "-q"])?;
        let pid_prefix = format!("<{}.", node.name);
        let on_node = |line: &&str| line.starts_with(&pid_prefix);
        Ok(listing.lines().filter(on_node).filter(|line| line.contains(name)).count())
    }

    /// Stops every node and removes the folders. A node that does not answer (still booting when
    /// a start failed) is killed by its unique name.
    fn teardown(&mut self) {
        for node in &self.nodes {
            let stopped = as_rabbitmq(CTL, &["-n", &node.name, "stop"], &self.env(node));
            if !stopped.is_ok_and(|o| o.status.success()) {
                kill_node(&node.name);
            }
        }
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Kills the processes of node `name` (found by the `RABBITMQ_NODENAME` in their environment: the
/// name is not on the command line).
fn kill_node(name: &str) {
    let wanted = format!("RABBITMQ_NODENAME={name}");
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for entry in entries.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        if environ.split(|b| *b == 0).any(|var| var == wanted.as_bytes()) {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.teardown();
    }
}
