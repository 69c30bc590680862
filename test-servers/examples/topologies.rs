//! Starts a private Redis Cluster and a Sentinel set, prints their URLs, waits for Enter.
fn main() {
    let cluster = test_servers::cluster::RedisCluster::start();
    let sentinel = test_servers::sentinel::RedisSentinel::start();
    println!("{}\n{}", cluster.url, sentinel.url);
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}
