//! A real redis-server for the tests that share state through it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server on a free loopback port, killed on drop.
pub struct Redis {
    pub child: Child,
    pub port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_redis() -> Redis {
    start_redis_on(std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port())
}

pub fn start_redis_on(port: u16) -> Redis {
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start redis-server ({e}): install it with `apt-get install -y redis-server` (.ci/run does)")
        });
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(10), "redis-server did not come up on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Redis { child, port }
}
