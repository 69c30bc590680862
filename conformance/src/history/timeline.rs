//! A history as an HTML page: one lane per client, each hold a bar from its obtain's
//! return to its last claim (the obtain in flight before it, lighter), faults as vertical
//! lines, and the holds a violation names outlined in red and listed above.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use super::check::Violation;
use super::record::{line, At, Event, History, OpId, Return};

/// The timeline's width in pixels (the time shown is scaled to it), lanes' height, the
/// margin for the lane names.
const WIDTH: f64 = 1200.0;
const LANE: f64 = 28.0;
const LEFT: f64 = 70.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page for the events of `key` in `history`, with `violation` marked. The time
/// shown is the violation's neighbourhood: from 200 ms before its first event to 200 ms
/// after its last (the whole history when there is none), scaled to 1,200 pixels.
pub fn render(history: &History, key: &str, violation: Option<&Violation>) -> String {
    let marked: BTreeSet<OpId> = violation
        .map(|v| v.ops.iter().copied().collect())
        .unwrap_or_default();
    let (from, to) = match violation.filter(|v| !v.excerpt.events.is_empty()) {
        Some(v) => {
            let first = v
                .excerpt
                .events
                .iter()
                .map(Event::at)
                .min()
                .unwrap_or_default();
            let last = v
                .excerpt
                .events
                .iter()
                .map(Event::at)
                .max()
                .unwrap_or_default();
            (
                first.saturating_sub(At::from_millis(200)),
                last + At::from_millis(200),
            )
        }
        None => (
            At::ZERO,
            history
                .events
                .iter()
                .map(Event::at)
                .max()
                .unwrap_or_default(),
        ),
    };
    let px_per_ms = WIDTH / ((to.saturating_sub(from)).as_secs_f64() * 1000.0).max(1.0);
    let x = |at: At| LEFT + (at.saturating_sub(from)).as_secs_f64() * 1000.0 * px_per_ms;

    // Per hold of the key: client, invoked, obtained, last claim, fencing.
    struct Bar {
        client: usize,
        invoked: At,
        obtained: Option<(At, u64)>,
        last: Option<At>,
        end: Option<At>,
    }
    let mut bars: BTreeMap<OpId, Bar> = BTreeMap::new();
    let mut faults = Vec::new();
    for e in &history.events {
        match e {
            Event::Invoke {
                op,
                client,
                key: k,
                call,
                at,
            } if k == key && call.asks().is_some() => {
                bars.insert(
                    *op,
                    Bar {
                        client: *client,
                        invoked: *at,
                        obtained: None,
                        last: None,
                        end: None,
                    },
                );
            }
            Event::Return {
                op,
                result: Return::Obtained { fencing },
                at,
            } => {
                if let Some(b) = bars.get_mut(op) {
                    b.obtained = Some((*at, *fencing));
                }
            }
            Event::Return { op, at, .. } | Event::Cancel { op, at } => {
                if let Some(b) = bars.get_mut(op) {
                    b.end.get_or_insert(*at);
                }
            }
            Event::Claim { hold, at } => {
                if let Some(b) = bars.get_mut(hold) {
                    b.last = Some(b.last.map_or(*at, |l| l.max(*at)));
                }
            }
            Event::Fault { fault, at } => faults.push((*at, format!("{fault:?}"))),
            _ => {}
        }
    }
    bars.retain(|_, b| b.invoked <= to && b.last.or(b.end).unwrap_or(b.invoked) >= from);
    let clients: BTreeSet<usize> = bars.values().map(|b| b.client).collect();
    let lane: HashMap<usize, usize> = clients.iter().enumerate().map(|(i, c)| (*c, i)).collect();
    let width = LEFT + WIDTH + 20.0;
    let height = LANE * (clients.len() as f64 + 1.0) + 20.0;

    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="monospace" font-size="11">"#
    );
    for (c, i) in &lane {
        let y = LANE * (*i as f64 + 1.0);
        let _ = write!(
            svg,
            r##"<text x="4" y="{:.1}">c{c}</text><line x1="{LEFT}" y1="{:.1}" x2="{width:.0}" y2="{:.1}" stroke="#ddd"/>"##,
            y + 4.0,
            y + 10.0,
            y + 10.0
        );
    }
    for (op, b) in &bars {
        let y = LANE * (lane[&b.client] as f64 + 1.0) - 8.0;
        let red = marked.contains(op);
        let stroke = if red {
            r##" stroke="#d00" stroke-width="3""##
        } else {
            ""
        };
        match b.obtained {
            Some((obtained, fencing)) => {
                let _ = write!(
                    svg,
                    r##"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="16" fill="#cde"/>"##,
                    x(b.invoked),
                    (x(obtained) - x(b.invoked)).max(1.0)
                );
                let last = b.last.unwrap_or(obtained);
                let class = if red { "violation" } else { "hold" };
                let _ = write!(
                    svg,
                    r##"<rect class="{class}" data-op="{op}" x="{:.1}" y="{y:.1}" width="{:.1}" height="16" fill="#48c"{stroke}><title>#{op} c{} fencing {fencing}</title></rect><text x="{:.1}" y="{:.1}" fill="#fff">#{op}</text>"##,
                    x(obtained),
                    (x(last) - x(obtained)).max(2.0),
                    b.client,
                    x(obtained) + 2.0,
                    y + 12.0
                );
            }
            None => {
                let end = b.end.unwrap_or(b.invoked);
                let _ = write!(
                    svg,
                    r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="6" fill="#ccc"{stroke}/>"##,
                    x(b.invoked),
                    y + 5.0,
                    (x(end) - x(b.invoked)).max(1.0)
                );
            }
        }
    }
    for (at, what) in faults.iter().filter(|(at, _)| *at >= from && *at <= to) {
        let _ = write!(
            svg,
            r##"<line x1="{0:.1}" y1="10" x2="{0:.1}" y2="{height:.0}" stroke="#e80" stroke-dasharray="4"/><text x="{1:.1}" y="12" fill="#e80">{what}</text>"##,
            x(*at),
            x(*at) + 2.0
        );
    }
    svg.push_str("</svg>");

    let title = match violation {
        Some(v) => format!("{:?} on {:?}", v.rule, v.key),
        None => format!("history of {key:?}"),
    };
    let mut page = String::new();
    let _ = write!(
        page,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{}</title></head><body>\
         <h1>{}</h1>",
        escape(&title),
        escape(&title)
    );
    if let Some(v) = violation {
        let _ = write!(page, "<p id=\"message\">{}</p>", escape(&v.message));
    }
    let _ = write!(
        page,
        "<div style=\"overflow-x:auto\">{svg}</div><p>Bars: a hold from its obtain's return to \
         its last claim (light: the obtain in flight; grey: an obtain that got nothing); \
         dashed lines: faults; red outline: the holds the violation names. Times from \
         {:.1} ms to {:.1} ms, {px_per_ms:.2} px a ms.</p>",
        from.as_secs_f64() * 1000.0,
        to.as_secs_f64() * 1000.0
    );
    if let Some(v) = violation {
        page.push_str("<h2>The events that show it</h2><pre>");
        for e in &v.excerpt.events {
            let _ = writeln!(page, "{}", escape(&line(e)));
        }
        page.push_str("</pre>");
    }
    page.push_str("</body></html>");
    page
}
