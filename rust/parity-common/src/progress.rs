//! The progress lines a runner writes to standard error while it trains: `step t/steps loss
//! x` at every tenth of the run, at its last step, and whenever [`HEARTBEAT`] has passed
//! since the last line. The workflow's watchdog (`scripts/parity/core/watchdog.py`) takes a
//! line on standard error as progress and stops a runner that writes nothing for
//! `limits.user_code_idle_seconds`, so a run whose steps complete is never stopped, however
//! rarely it records, while a step that never ends (a port's forward that loops) is.

use std::time::{Duration, Instant};

/// The longest a training run whose steps complete goes without a progress line.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// Progress of one training run of `steps` steps (see the module docs).
pub struct Progress {
    steps: u32,
    every: u32,
    last: Instant,
}

impl Progress {
    /// A run of `steps` steps (≥ 1) whose clock starts now.
    pub fn new(steps: u32) -> Self {
        Self {
            steps,
            every: (steps / 10).max(1),
            last: Instant::now(),
        }
    }

    /// Whether step `t` (1-based) gets a line: a tenth of the run, the last step, or
    /// [`HEARTBEAT`] after the last line.
    pub fn due(&self, t: u32) -> bool {
        t.is_multiple_of(self.every) || t == self.steps || self.last.elapsed() >= HEARTBEAT
    }

    /// After step `t` completed with loss `loss`: writes its line on standard error when
    /// [`Progress::due`].
    pub fn step(&mut self, t: u32, loss: f64) {
        if self.due(t) {
            eprintln!("step {t}/{} loss {loss:.8}", self.steps);
            self.last = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_at_each_tenth_the_last_step_and_after_a_heartbeat() {
        let p = Progress::new(95);
        let due: Vec<u32> = (1..=95).filter(|&t| p.due(t)).collect();
        assert_eq!(due, vec![9, 18, 27, 36, 45, 54, 63, 72, 81, 90, 95]);
        let mut p = Progress::new(1000);
        p.last = Instant::now() - HEARTBEAT;
        assert!(p.due(7));
        p.step(7, 0.5);
        assert!(!p.due(8));
    }
}
