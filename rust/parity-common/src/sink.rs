//! A frame sink that writes on a thread of its own, so a runner trains on while its last
//! step's frame travels down the pipe to the workflow.
//!
//! A pipe holds 1 MiB at most (`scripts/parity/train/rust.py` widens it to that), and a
//! recorded step of a large model is megabytes: written directly, every step waited until
//! the reading process had drained all but the pipe's last MiB of it. On the scale MLP
//! (7.4 MB a step, 200 steps, 2 cores) that wait was about 0.5 s of a 7 s run
//! (docs/performance.md, "2026-12-05: where the candle runner's time went").

use std::io::{self, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

/// Capacity reserved up front for a frame whose length prefix announces more: only an
/// optimisation (a larger frame grows its buffer), so a corrupt length cannot make it
/// allocate gigabytes.
const MAX_RESERVE: usize = 256 << 20;

enum Message {
    /// Bytes to write, in order.
    Bytes(Vec<u8>),
    /// Flush the inner sink and answer once every earlier byte is written.
    Sync(SyncSender<()>),
}

/// Writes the frame stream (see [`crate::frames`]) to `inner` on a background thread.
///
/// [`Write::write`] collects bytes and hands each frame to the thread as soon as it is
/// complete (it reads each frame's length prefix to know where the frame ends), so frames
/// reach the reader one by one, as they would written directly. The hand-over waits only
/// while the thread is still writing the frame before (a rendezvous): at most three frames
/// are in memory at once, the one the runner is building, the one being collected and the
/// one being written.
///
/// [`Write::flush`] waits until every byte handed over so far is written and the inner sink
/// is flushed, so a runner that flushes before it reads its clock times the writing too.
/// An error of the inner sink (a closed pipe) ends the thread; the next `write` or `flush`
/// returns it. Dropping the sink writes what is complete and waits for the thread, ignoring
/// errors (as `BufWriter` does): call `flush` to see them.
pub struct BackgroundSink {
    /// Bytes collected and not yet handed over: the current frame so far.
    pending: Vec<u8>,
    /// Bytes of the current frame seen so far (its length prefix included), and its total
    /// once the prefix is complete.
    seen: usize,
    total: Option<usize>,
    /// The first 8 bytes of the current frame, as they arrive.
    prefix: [u8; 8],
    tx: Option<SyncSender<Message>>,
    thread: Option<JoinHandle<io::Result<()>>>,
    /// The thread's error, once taken from it, as text (later calls report it again).
    failed: Option<String>,
}

impl BackgroundSink {
    /// Starts the writer thread for `inner`.
    ///
    /// # Errors
    /// When the operating system refuses a new thread.
    pub fn new<W: Write + Send + 'static>(inner: W) -> io::Result<Self> {
        let (tx, rx) = sync_channel::<Message>(0);
        let thread = std::thread::Builder::new()
            .name("frame-writer".into())
            .spawn(move || write_all_messages(inner, rx))?;
        Ok(Self {
            pending: Vec::new(),
            seen: 0,
            total: None,
            prefix: [0; 8],
            tx: Some(tx),
            thread: Some(thread),
            failed: None,
        })
    }

    /// Sends `message` to the thread; when the thread has ended, its error.
    fn send(&mut self, message: Message) -> io::Result<()> {
        match &self.tx {
            Some(tx) if self.failed.is_none() && tx.send(message).is_ok() => Ok(()),
            _ => Err(self.thread_error()),
        }
    }

    /// Why the thread ended (joined the first time it is asked; the same text after).
    fn thread_error(&mut self) -> io::Error {
        self.tx = None;
        let text =
            self.failed
                .get_or_insert_with(|| match self.thread.take().map(JoinHandle::join) {
                    Some(Ok(Err(e))) => format!("writing frames: {e}"),
                    Some(Err(_)) => "the frame writer thread panicked".to_string(),
                    _ => "the frame writer thread ended".to_string(),
                });
        io::Error::other(text.clone())
    }

    /// Hands the collected bytes to the thread.
    fn hand_over(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::take(&mut self.pending);
        self.send(Message::Bytes(bytes))
    }
}

fn write_all_messages<W: Write>(mut inner: W, rx: Receiver<Message>) -> io::Result<()> {
    for message in rx {
        match message {
            Message::Bytes(bytes) => inner.write_all(&bytes)?,
            Message::Sync(done) => {
                inner.flush()?;
                // the caller may have stopped waiting (it was dropped): nothing to tell
                let _ = done.send(());
            }
        }
    }
    inner.flush()
}

impl Write for BackgroundSink {
    fn write(&mut self, mut buf: &[u8]) -> io::Result<usize> {
        let len = buf.len();
        while !buf.is_empty() {
            let take = match self.total {
                None => {
                    let take = (8 - self.seen).min(buf.len());
                    self.prefix[self.seen..self.seen + take].copy_from_slice(&buf[..take]);
                    take
                }
                Some(total) => (total - self.seen).min(buf.len()),
            };
            self.pending.extend_from_slice(&buf[..take]);
            self.seen += take;
            buf = &buf[take..];
            if self.total.is_none() && self.seen == 8 {
                let body = u64::from_le_bytes(self.prefix);
                let body = usize::try_from(body).unwrap_or(usize::MAX);
                self.pending.reserve_exact(body.min(MAX_RESERVE));
                self.total = Some(body.saturating_add(8));
            }
            if self.total == Some(self.seen) {
                self.seen = 0;
                self.total = None;
                self.hand_over()?;
            }
        }
        Ok(len)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.hand_over()?;
        let (done, wait) = sync_channel(1);
        self.send(Message::Sync(done))?;
        // no answer: the thread ended before it got there
        wait.recv().map_err(|_| self.thread_error())
    }
}

impl Drop for BackgroundSink {
    fn drop(&mut self) {
        let _ = self.hand_over();
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A sink that records what reached it, and when it was flushed.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Recorder {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            self.0.lock().unwrap().1 += 1;
            Ok(())
        }
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn frames_arrive_whole_in_order_however_the_writes_split_them() {
        let stream: Vec<u8> = [frame(b"first"), frame(b""), frame(&[7u8; 5000])].concat();
        for chunk in [1, 3, 8, 9, 4096, stream.len()] {
            let rec = Recorder::default();
            let mut sink = BackgroundSink::new(rec.clone()).unwrap();
            for piece in stream.chunks(chunk) {
                sink.write_all(piece).unwrap();
            }
            sink.flush().unwrap();
            assert_eq!(rec.0.lock().unwrap().0, stream, "chunks of {chunk}");
        }
    }

    #[test]
    fn a_complete_frame_is_handed_over_without_a_flush() {
        let rec = Recorder::default();
        let mut sink = BackgroundSink::new(rec.clone()).unwrap();
        sink.write_all(&frame(b"header")).unwrap();
        sink.write_all(&frame(b"st")[..5]).unwrap(); // part of the next frame
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while rec.0.lock().unwrap().0.len() < 14 {
            assert!(
                std::time::Instant::now() < deadline,
                "the first frame never arrived"
            );
            std::thread::yield_now();
        }
        assert_eq!(rec.0.lock().unwrap().0, frame(b"header"));
        drop(sink); // writes what it holds, even a partial frame
        assert_eq!(
            rec.0.lock().unwrap().0,
            [frame(b"header"), frame(b"st")[..5].to_vec()].concat()
        );
    }

    #[test]
    fn flush_waits_until_the_inner_sink_is_flushed() {
        let rec = Recorder::default();
        let mut sink = BackgroundSink::new(rec.clone()).unwrap();
        sink.write_all(&frame(&[1u8; 100])[..50]).unwrap();
        sink.flush().unwrap();
        let (bytes, flushes) = rec.0.lock().unwrap().clone();
        assert_eq!((bytes.len(), flushes), (50, 1));
    }

    /// A sink whose reader has gone away.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_inner_sinks_error_reaches_the_runner_and_stays() {
        let mut sink = BackgroundSink::new(Closed).unwrap();
        sink.write_all(&frame(b"lost")).unwrap(); // handed over; the thread fails on it
        let first = sink.flush().unwrap_err().to_string();
        assert!(
            first.contains("writing frames") && first.contains("roken pipe"),
            "{first}"
        );
        let again = sink.write_all(&frame(b"more")).unwrap_err().to_string();
        assert_eq!(again, first);
    }
}
