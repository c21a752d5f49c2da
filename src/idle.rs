//! Silence timers: "nothing happened for this long", for the SSE keep-alive
//! to the client (`fronts/sse.rs`) and the idle timeout of an upstream
//! stream (`provider/sse_in.rs`).
//!
//! Activity only records the time; the one timer is moved when it fires
//! early, never per event. Once polled it holds the task's waker, so it is
//! polled again only near its deadline or for another waker: polling a
//! `Sleep` on every wait between chunks was a visible part of the cost of
//! re-emitting a chunk.

use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// A timer this close to its deadline is polled, not trusted to wake us.
const DUE: Duration = Duration::from_millis(1);

/// Ready once `period` has passed since the last [`Silence::touch`] (or the
/// creation), then counts again from that moment.
pub struct Silence {
    period: Duration,
    last: Instant,
    /// Armed at the first wait.
    timer: Option<Pin<Box<Sleep>>>,
    /// The waker the timer was last polled with.
    waker: Option<Waker>,
}

impl Silence {
    pub fn new(period: Duration) -> Self {
        Silence { period, last: Instant::now(), timer: None, waker: None }
    }

    /// How long a silence lasts before it counts.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Something happened: the silence starts again now.
    pub fn touch(&mut self) {
        self.last = Instant::now();
    }

    /// `Ready` when the silence has lasted `period`; otherwise the task is
    /// woken when it will have.
    pub fn poll_elapsed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.last + self.period;
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        let same = self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        if same && Instant::now() + DUE < timer.deadline() {
            return Poll::Pending;
        }
        if !same {
            self.waker = Some(cx.waker().clone());
        }
        loop {
            match timer.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) if Instant::now() >= self.last + self.period => {
                    self.last = Instant::now();
                    timer.as_mut().reset(self.last + self.period);
                    return Poll::Ready(());
                }
                // Fired early (activity since it was set): move it.
                Poll::Ready(()) => timer.as_mut().reset(self.last + self.period),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn elapsed(s: &mut Silence) {
        std::future::poll_fn(|cx| s.poll_elapsed(cx)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn counts_from_the_last_touch_across_early_fires() {
        let mut s = Silence::new(Duration::from_secs(15));
        let start = Instant::now();
        // Armed at 0 s for 15 s; touched at 10 s, so it fires early at 15 s,
        // is moved, and the silence ends at 25 s, then again at 40 s.
        let first = tokio::time::timeout(Duration::from_secs(10), elapsed(&mut s)).await;
        assert!(first.is_err());
        s.touch();
        elapsed(&mut s).await;
        assert_eq!(start.elapsed(), Duration::from_secs(25));
        elapsed(&mut s).await;
        assert_eq!(start.elapsed(), Duration::from_secs(40));
    }
}
