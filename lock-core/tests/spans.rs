//! The spans a trace shows of a lock: `lock.obtain` around the wait (how long it waited,
//! how it ended) and `lock.hold` around the hold (how long, how it ended), the hold's a
//! child of the span the obtain was called in, not of the obtain's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{Locker, MemoryBackend};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Each closed span: its name, its parent's name and its fields.
type Closed = Arc<Mutex<Vec<(String, Option<String>, HashMap<String, String>)>>>;

#[derive(Default)]
struct Fields(HashMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().into(),
            format!("{value:?}").trim_matches('"').into(),
        );
    }
}

struct Spans(Closed);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                values.record(fields);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let fields = span.extensions_mut().remove::<Fields>().unwrap_or_default();
        let parent = span.parent().map(|p| p.name().to_owned());
        self.0
            .lock()
            .unwrap()
            .push((span.name().into(), parent, fields.0));
    }
}

#[tokio::test]
async fn a_trace_shows_the_wait_and_the_hold() {
    let closed = Closed::default();
    let subscriber = tracing_subscriber::registry().with(Spans(Arc::clone(&closed)));
    let _default = tracing::subscriber::set_default(subscriber);
    let locker = Locker::new(Arc::new(MemoryBackend::new()));
    let first = locker
        .lock("report")
        .try_obtain()
        .await
        .unwrap()
        .obtained()
        .unwrap();
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        first.release().await.unwrap();
    });
    let request = tracing::debug_span!("request");
    let second = {
        tracing::Instrument::instrument(
            locker.lock("report").wait(Duration::from_secs(10)).obtain(),
            request.clone(),
        )
        .await
        .unwrap()
        .obtained()
        .unwrap()
    };
    releaser.await.unwrap();
    second.release().await.unwrap();
    drop(request);
    let closed = closed.lock().unwrap().clone();
    let named = |name: &str| -> Vec<_> { closed.iter().filter(|s| s.0 == name).collect() };
    let waited = named("lock.obtain")
        .into_iter()
        .find(|s| s.1.as_deref() == Some("request"))
        .unwrap_or_else(|| panic!("no obtain under the request: {closed:?}"));
    assert_eq!(waited.2["outcome"], "obtained", "{waited:?}");
    assert_eq!(waited.2["key"], "report");
    let ms: u64 = waited.2["waited_ms"].parse().unwrap();
    assert!(ms >= 100, "waited {ms} ms: {waited:?}");
    let holds = named("lock.hold");
    assert_eq!(holds.len(), 2, "{closed:?}");
    let hold = holds
        .iter()
        .find(|s| s.1.as_deref() == Some("request"))
        .unwrap_or_else(|| panic!("the second hold is the request's child: {closed:?}"));
    assert_eq!(hold.2["end"], "released", "{hold:?}");
    assert!(hold.2.contains_key("held_ms"), "{hold:?}");
    assert!(hold.2.contains_key("fencing"), "{hold:?}");
}
