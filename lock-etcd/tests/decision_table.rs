//! The contract's decision table (`lock_conformance::table`) through a real etcd member:
//! each row's record is written as the backend lays a lock out (`src/layout.rs`: leased
//! `H/`, `G/`, `C`, `W` keys and the permanent `F`), the request goes through the
//! backend, and the keys are read back with their leases' time left.
//!
//! etcd keeps no end times: a lease holds its keys until it ends, and then they are gone.
//! So a row's past ends are written as absent keys (an expired hold is its `G/` key alone,
//! a hold past its grace and a cooldown that ended leave only `F`), read back the same
//! way, and compared with `Case::check_coarse`, which takes a past end as "ended" on both
//! sides. Everything else (outcomes, counts, fencing tokens, who holds, the times still
//! running) is checked as on every other backend. The writer of these keys is this file,
//! not the backend's code: it reads the layout as a second pair of eyes.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{Client, GetOptions, PutOptions};
use lock_conformance::table::{
    Before, Seen, SeenShare, Who, CAPACITY, CASES, FENCING, GRACE_MS, TTL_MS,
};
use lock_core::backend::Token;
use lock_core::{HolderInfo, Key};
use lock_etcd::EtcdBackend;
use serde_json::{json, Value};

/// etcd reports a lease's time left in whole seconds, rounded down, and a few milliseconds
/// pass between the write of a row and its read.
const SLACK_MS: u64 = 2_000;

/// The base of `key`'s keys under `prefix`, as `src/layout.rs` names it.
fn base(prefix: &str, key: &str) -> String {
    let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}/{hex}/")
}

/// A lease of `ms` (a multiple of a second in every row), granted now.
async fn lease(client: &mut Client, ms: i64) -> i64 {
    assert!(
        ms > 0 && ms % 1_000 == 0,
        "a row's time that is no whole second: {ms} ms"
    );
    client
        .lease_grant(ms / 1_000, None)
        .await
        .expect("grant a lease")
        .id()
}

async fn put(client: &mut Client, key: String, value: Value, lease_ms: Option<i64>) {
    let options = match lease_ms {
        Some(ms) => Some(PutOptions::new().with_lease(lease(client, ms).await)),
        None => None,
    };
    client
        .put(key, value.to_string(), options)
        .await
        .expect("write a row's key");
}

/// What the backend keeps of one hold in both its keys.
fn hold_value(
    holds: u32,
    fencing: u64,
    weight: Option<u32>,
    expires_in_ms: i64,
    forget_in_ms: i64,
) -> Value {
    let holder = serde_json::to_value(HolderInfo::current()).unwrap();
    // The ttl a live hold was last set for is the time it has left (what `Busy` and
    // `inspect` report); an expired hold's no longer matters.
    let ttl_ms = if expires_in_ms > 0 {
        expires_in_ms
    } else {
        TTL_MS as i64
    };
    let mut value = json!({
        "holder": holder,
        "holds": holds,
        "fencing": fencing,
        "ttl_ms": ttl_ms,
        "grace_ms": forget_in_ms - expires_in_ms,
        // The older of two holds is the one renewed first: the order of their ends (every
        // end of a row is within ±100 s of the request).
        "renewed": expires_in_ms + 100_000,
    });
    if let Some(weight) = weight {
        value["shared"] = json!({ "capacity": CAPACITY, "weight": weight });
    }
    value
}

/// A hold's keys: `H/` while it is live, `G/` until its grace ends, neither after.
async fn write_hold(
    client: &mut Client,
    base: &str,
    token: &str,
    value: Value,
    expires_in_ms: i64,
    forget_in_ms: i64,
) {
    if expires_in_ms > 0 {
        put(
            client,
            format!("{base}H/{token}"),
            value.clone(),
            Some(expires_in_ms),
        )
        .await;
    }
    if forget_in_ms > 0 {
        put(
            client,
            format!("{base}G/{token}"),
            value,
            Some(forget_in_ms),
        )
        .await;
    }
}

/// Writes a row's record under `base`.
async fn write(client: &mut Client, base: &str, before: Before, digest: impl Fn(Who) -> String) {
    if before == Before::Nothing {
        return;
    }
    // Every lock that ever issued a token keeps its last one in `F`.
    put(
        client,
        format!("{base}F"),
        json!({ "fencing": FENCING }),
        None,
    )
    .await;
    match before {
        Before::Nothing | Before::Free => {}
        Before::Cooling { left_ms } => {
            if left_ms > 0 {
                let value = json!({ "fencing": FENCING, "ms": left_ms });
                put(client, format!("{base}C"), value, Some(left_ms)).await;
            }
        }
        Before::Held {
            by,
            holds,
            expires_in_ms,
            forget_in_ms,
        } => {
            let value = hold_value(holds, FENCING, None, expires_in_ms, forget_in_ms);
            write_hold(
                client,
                base,
                &digest(by),
                value,
                expires_in_ms,
                forget_in_ms,
            )
            .await;
        }
        Before::Shared { .. } => {
            // At a clock that reads 0 now, its absolute times are the times from now.
            let shared = before.shared_at(0).unwrap();
            for share in shared.holds {
                let (expires, forget) = (share.expires, share.forget);
                let value = hold_value(
                    share.holds,
                    share.fencing,
                    Some(share.weight),
                    expires,
                    forget,
                );
                write_hold(client, base, &digest(share.by), value, expires, forget).await;
            }
            if let Some((by, until)) = shared.writer {
                let value = json!({ "token": digest(by), "ms": until });
                put(client, format!("{base}W"), value, Some(until)).await;
            }
        }
    }
}

/// One hold as read back: its value, and the time left on its keys' leases.
#[derive(Default)]
struct ReadHold {
    value: Option<Value>,
    live_ms: Option<i64>,
    evidence_ms: Option<i64>,
}

/// The keys under `base`, read back as the table sees a record.
async fn read(client: &mut Client, base: &str, who: impl Fn(&str) -> Option<Who>) -> Seen {
    let range = GetOptions::new().with_range(format!("{base}X"));
    let got = client
        .get(format!("{base}C"), Some(range))
        .await
        .expect("read a row's keys");
    let mut holds: BTreeMap<String, ReadHold> = BTreeMap::new();
    let (mut fence, mut cooling, mut writer) = (None, None, None);
    for kv in got.kvs() {
        let name = kv.key_str().unwrap();
        let slot = name.strip_prefix(base).unwrap().to_owned();
        let value: Value = serde_json::from_slice(kv.value()).unwrap();
        let left_ms = if kv.lease() == 0 {
            None
        } else {
            let ttl = client
                .lease_time_to_live(kv.lease(), None)
                .await
                .expect("read a lease's time left")
                .ttl();
            Some(ttl * 1_000)
        };
        match slot.as_str() {
            "F" => fence = Some(value["fencing"].as_u64().unwrap()),
            "C" => cooling = Some((value["fencing"].as_u64().unwrap(), left_ms.unwrap())),
            "W" => {
                let token = value["token"].as_str().unwrap().to_owned();
                writer = Some((who(&token), left_ms.unwrap()));
            }
            _ => {
                let (live, token) = match (slot.strip_prefix("H/"), slot.strip_prefix("G/")) {
                    (Some(token), _) => (true, token),
                    (_, Some(token)) => (false, token),
                    _ => panic!("a key the backend never writes: {name}"),
                };
                let hold = holds.entry(token.to_owned()).or_default();
                if live {
                    hold.live_ms = left_ms;
                } else {
                    hold.evidence_ms = left_ms;
                }
                assert_eq!(
                    hold.value.get_or_insert_with(|| value.clone()),
                    &value,
                    "{name}: the hold's two keys disagree"
                );
            }
        }
    }
    let fence = fence.unwrap_or(0);
    let ended = |ms: Option<i64>| ms.unwrap_or(Seen::OVER);
    let mut shares = Vec::new();
    let mut exclusive = Vec::new();
    for (token, hold) in &holds {
        let value = hold.value.as_ref().unwrap();
        let n = |f: &str| value[f].as_u64().unwrap();
        match value.get("shared") {
            Some(permits) => shares.push(SeenShare {
                by: who(token),
                weight: u32::try_from(permits["weight"].as_u64().unwrap()).unwrap(),
                holds: u32::try_from(n("holds")).unwrap(),
                fencing: n("fencing"),
                expires_in_ms: ended(hold.live_ms),
                forget_in_ms: ended(hold.evidence_ms),
            }),
            None => exclusive.push(Seen::Held {
                by: who(token),
                holds: u32::try_from(n("holds")).unwrap(),
                fencing: n("fencing"),
                expires_in_ms: ended(hold.live_ms),
                forget_in_ms: ended(hold.evidence_ms),
            }),
        }
    }
    match (exclusive.len(), shares.is_empty()) {
        (1, true) if writer.is_none() => exclusive.pop().unwrap(),
        (0, false) => {
            // In admission order, as the backend reads them.
            shares.sort_by_key(|s| s.fencing);
            let fencing = shares.iter().map(|s| s.fencing).max().unwrap().max(fence);
            let capacities: Vec<u64> = holds
                .values()
                .map(|h| {
                    h.value.as_ref().unwrap()["shared"]["capacity"]
                        .as_u64()
                        .unwrap()
                })
                .collect();
            assert!(
                capacities.iter().all(|&c| c == capacities[0]),
                "capacities differ"
            );
            Seen::Shared {
                fencing,
                capacity: u32::try_from(capacities[0]).unwrap(),
                holds: shares,
                writer,
            }
        }
        (0, true) => match (cooling, writer) {
            (Some((fencing, left_ms)), None) => Seen::Cooling {
                fencing: fencing.max(fence),
                left_ms,
            },
            (None, None) if got.kvs().is_empty() => Seen::Nothing,
            (None, None) => Seen::Free { fencing: fence },
            (None, Some(writer)) => Seen::Shared {
                fencing: fence,
                capacity: CAPACITY,
                holds: Vec::new(),
                writer: Some(writer),
            },
            (Some(_), Some(_)) => panic!("{base}: a cooldown and a writer's marker at once"),
        },
        _ => panic!("{base}: holds the backend never writes together: {exclusive:?}, {shares:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_keys_keep_the_decision_table() {
    let cluster = support::cluster();
    let endpoints = cluster.endpoints();
    let prefix = support::fresh_prefix();
    let backend = EtcdBackend::builder(endpoints.iter().cloned())
        .prefix(&prefix)
        .grace(Duration::from_millis(GRACE_MS))
        .connect()
        .await
        .expect("connect to the test etcd");
    let mut client = Client::connect(endpoints, None)
        .await
        .expect("connect to the test etcd");
    let tokens = [
        (Who::A, Token::generate().unwrap()),
        (Who::B, Token::generate().unwrap()),
        (Who::C, Token::generate().unwrap()),
    ];
    let digest = |who: Who| {
        tokens
            .iter()
            .find(|(w, _)| *w == who)
            .map(|(_, t)| t.digest())
            .unwrap()
    };
    let who = |stored: &str| {
        tokens
            .iter()
            .find(|(_, t)| t.digest() == stored)
            .map(|(w, _)| *w)
    };
    for (i, case) in CASES.iter().enumerate() {
        let key = Key::new(format!("case-{i}")).unwrap();
        let base = base(&prefix, key.as_str());
        write(&mut client, &base, case.before, digest).await;
        let answer = case
            .send(&backend, &key, &tokens[0].1)
            .await
            .unwrap_or_else(|e| panic!("case \"{}\": {e}", case.name));
        let seen = read(&mut client, &base, who).await;
        if let Err(e) = case.check_coarse(&answer, &seen, SLACK_MS) {
            panic!("{e}");
        }
    }
}
