//! The frame stream: how a Rust runner hands tensors to the workflow.
//!
//! A stream is a sequence of frames. Each frame is an unsigned 64-bit little-endian byte
//! count `n` followed by `n` bytes holding one complete safetensors buffer
//! (<https://github.com/huggingface/safetensors#format>). The buffer's `__metadata__`
//! carries a `kind` key:
//!
//! * `header`: the first frame. Metadata describes the run (framework, versions, device);
//!   it holds no tensors.
//! * `step`: one recorded training step. Metadata `step` is the step number (0 is the
//!   initial state). Tensors are named by PyTorch state_dict key (`fc1.weight`), flattened
//!   to one dimension in PyTorch layout, in the run's dtype; `loss` is a one-element F64
//!   tensor (absent at step 0); gradients and optimizer moments use the prefixes
//!   `grad:`, `exp_avg:` and `exp_avg_sq:`. Every runner writes it with
//!   [`crate::optim::RunOptimizer::write_step`].
//! * `result`: the outcome of one (case, quantity) of an op probe; metadata and statuses in
//!   [`crate::probe_spec::result_meta`].
//! * `end`: the last frame; metadata `status` is `complete` or `diverged`.
//!
//! The reader is `scripts/parity/trace/frames.py`.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::View;

use crate::sink::BackgroundSink;

/// Writes frames to any byte sink (a file or standard output).
pub struct FrameWriter<W: Write> {
    sink: W,
}

impl<W: Write> FrameWriter<W> {
    /// Wraps `sink`; nothing is written until [`FrameWriter::write`].
    pub fn new(sink: W) -> Self {
        Self { sink }
    }

    /// Serialises `tensors` with `metadata` (which must contain `kind`) as one frame. The
    /// sink decides when it reaches the reader: [`open_sink`]'s for standard output hands
    /// over every complete frame at once, so the reader sees every finished step even if
    /// the run fails later.
    ///
    /// The frame's body is the buffer `safetensors::serialize` would return, byte for byte
    /// (the same order: dtype by descending alignment, then name; the header that
    /// safetensors' own `Metadata` validates and serialises, padded to 8 bytes), but it is
    /// written to the sink piece by piece: a recorded step of a large model is megabytes,
    /// and assembling it in one buffer first cost every step a copy (docs/performance.md).
    ///
    /// # Errors
    /// Fails for two tensors with one name, when safetensors' header validation refuses the
    /// tensors, or when the sink fails.
    pub fn write<S, V, I>(&mut self, metadata: HashMap<String, String>, tensors: I) -> Result<()>
    where
        S: AsRef<str> + Ord + std::fmt::Display,
        V: View,
        I: IntoIterator<Item = (S, V)>,
    {
        debug_assert!(metadata.contains_key("kind"), "frame without kind");
        let mut tensors: Vec<(S, V)> = tensors.into_iter().collect();
        tensors.sort_by(|(a, x), (b, y)| y.dtype().cmp(&x.dtype()).then(a.cmp(b)));
        let mut infos = Vec::with_capacity(tensors.len());
        let mut offset = 0;
        let mut names = std::collections::HashSet::new();
        for (name, t) in &tensors {
            if !names.insert(name.as_ref()) {
                bail!("two tensors named {name} in one frame");
            }
            let n = t.data_len();
            let info = TensorInfo {
                dtype: t.dtype(),
                shape: t.shape().to_vec(),
                data_offsets: (offset, offset + n),
            };
            infos.push((name.to_string(), info));
            offset += n;
        }
        let header =
            Metadata::new(Some(metadata), infos).context("serialising a frame as safetensors")?;
        let mut header = serde_json::to_vec(&header).context("serialising a frame header")?;
        header.resize(header.len().next_multiple_of(8), b' ');
        let body = 8 + header.len() + offset;
        let sink = &mut self.sink;
        sink.write_all(&(body as u64).to_le_bytes())
            .context("writing frame length")?;
        sink.write_all(&(header.len() as u64).to_le_bytes())
            .context("writing frame header")?;
        sink.write_all(&header).context("writing frame header")?;
        for (_, t) in &tensors {
            sink.write_all(&t.data()).context("writing frame body")?;
        }
        Ok(())
    }

    /// Waits until every frame written so far has reached the sink's destination (for
    /// standard output: the pipe). A runner flushes before it reads the clock for
    /// `train_seconds`, so that figure includes handing the trace over.
    ///
    /// # Errors
    /// When the sink fails (the reader closed the pipe, the disk is full).
    pub fn flush(&mut self) -> Result<()> {
        self.sink.flush().context("flushing frames")
    }

    /// Flushes ([`FrameWriter::flush`]) and closes the sink. Every runner ends with it:
    /// dropping the writer instead also writes what it holds but cannot report a failure.
    ///
    /// # Errors
    /// As [`FrameWriter::flush`].
    pub fn finish(mut self) -> Result<()> {
        self.flush()
    }

    /// Writes a frame that carries only metadata.
    ///
    /// # Errors
    /// As [`FrameWriter::write`].
    pub fn write_meta(&mut self, metadata: HashMap<String, String>) -> Result<()> {
        self.write(metadata, Vec::<(String, RawTensor)>::new())
    }
}

/// The standard output the process started with, once [`protocol_output`] has set it
/// apart (or why it could not).
static PROTOCOL: OnceLock<std::result::Result<OwnedFd, String>> = OnceLock::new();

/// The runner's protocol channel: the standard output the workflow reads (the frames of
/// `train`, `probe` and `replay` with `--out -`, `inspect`'s JSON), kept apart from whatever
/// else the process writes to standard output.
///
/// The first call duplicates descriptor 1 for the protocol and points descriptor 1 at
/// standard error (descriptor 2): from then on a port's `println!` (the first debug line a
/// porter writes), `print!`, or a C library's `printf` lands in the job's log with the
/// runner's own messages, never in the frame stream the workflow decodes. Call it before
/// any user code runs ([`crate::cli::run`] does, for every subcommand that runs a port or
/// writes frames to standard output). Every call returns a new handle on the same channel
/// (unbuffered: wrap it as needed); the protocol descriptor is close-on-exec.
///
/// # Errors
/// When standard output is not open, or descriptor 1 cannot be pointed at standard error
/// (the first call's error is returned again by later calls).
pub fn protocol_output() -> Result<std::fs::File> {
    let kept = PROTOCOL.get_or_init(|| set_stdout_apart().map_err(|e| format!("{e:#}")));
    match kept {
        Ok(fd) => Ok(std::fs::File::from(
            fd.try_clone().context("duplicating the protocol channel")?,
        )),
        Err(e) => bail!("setting standard output apart for the protocol: {e}"),
    }
}

/// Duplicates descriptor 1 and points descriptor 1 at descriptor 2; returns the duplicate.
fn set_stdout_apart() -> Result<OwnedFd> {
    extern "C" {
        fn dup2(oldfd: std::os::raw::c_int, newfd: std::os::raw::c_int) -> std::os::raw::c_int;
    }
    // Held throughout: no other thread's print slips in between the flush and the switch.
    let mut stdout = std::io::stdout().lock();
    stdout.flush().context("flushing standard output")?;
    let protocol = stdout
        .as_fd()
        .try_clone_to_owned()
        .context("duplicating standard output")?;
    // SAFETY: dup2 only replaces descriptor 1 of this process with a copy of descriptor 2;
    // it touches no memory, and Rust's standard output handle (held locked here) keeps
    // writing to descriptor 1, now standard error.
    if unsafe { dup2(2, 1) } < 0 {
        return Err(std::io::Error::last_os_error())
            .context("pointing standard output at standard error");
    }
    Ok(protocol)
}

/// The sink a runner writes frames to: for `-`, the protocol channel ([`protocol_output`],
/// the standard output the workflow reads) through a [`BackgroundSink`] (the runner trains
/// on while a frame is written to the pipe); else a new file (buffered).
///
/// # Errors
/// When the file cannot be created, the protocol channel cannot be set apart, or the
/// writer thread cannot start.
pub fn open_sink(path: &std::path::Path) -> Result<Box<dyn Write>> {
    Ok(if path.as_os_str() == "-" {
        // Not through standard output's own handle, which is line-buffered (it scans every
        // write for newlines) and, from now on, standard error.
        Box::new(BackgroundSink::new(protocol_output()?).context("starting the frame writer")?)
    } else {
        Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ))
    })
}

/// A plain little-endian tensor for runners whose own tensor type does not implement
/// [`safetensors::View`] (for example burn's), or for small host-side values.
#[derive(Debug, Clone)]
pub struct RawTensor {
    /// Element type.
    pub dtype: safetensors::Dtype,
    /// Shape; the product of its entries times the element size is `data.len()`.
    pub shape: Vec<usize>,
    /// Little-endian bytes, contiguous, row-major.
    pub data: Vec<u8>,
}

/// Little-endian bytes of `values`, `N` bytes each, written into one preallocated buffer
/// (a per-element iterator chain is several times slower on million-value tensors).
fn le_bytes<T: Copy, const N: usize>(values: &[T], to_le: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    let mut data = vec![0u8; values.len() * N];
    for (chunk, v) in data.chunks_exact_mut(N).zip(values) {
        chunk.copy_from_slice(&to_le(*v));
    }
    data
}

impl RawTensor {
    /// A one-dimensional F64 tensor holding `values`.
    pub fn from_f64(values: &[f64]) -> Self {
        Self {
            dtype: safetensors::Dtype::F64,
            shape: vec![values.len()],
            data: le_bytes(values, f64::to_le_bytes),
        }
    }

    /// A one-dimensional F32 tensor holding `values`.
    pub fn from_f32(values: &[f32]) -> Self {
        Self {
            dtype: safetensors::Dtype::F32,
            shape: vec![values.len()],
            data: le_bytes(values, f32::to_le_bytes),
        }
    }
}

impl View for RawTensor {
    fn dtype(&self) -> safetensors::Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Builds a metadata map from string pairs.
pub fn meta<const N: usize>(pairs: [(&str, String); N]) -> HashMap<String, String> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child process [`a_port_s_print_goes_to_standard_error_not_the_protocol`]
    /// starts: the child sets the protocol apart, prints and writes.
    const PROTOCOL_CHILD: &str = "PARITY_PROTOCOL_CHILD";

    #[test]
    fn a_port_s_print_goes_to_standard_error_not_the_protocol() {
        if std::env::var_os(PROTOCOL_CHILD).is_some() {
            let mut protocol = protocol_output().unwrap();
            println!("printed by the port");
            print!("and without a newline");
            protocol.write_all(b"<frames>").unwrap();
            let mut again = protocol_output().unwrap(); // the same channel
            again.write_all(b"<more>").unwrap();
            std::io::stdout().flush().unwrap();
            return;
        }
        // This test binary again, running only this test, in a process of its own: the
        // switch changes the process's descriptor 1 for good.
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "frames::tests::a_port_s_print_goes_to_standard_error_not_the_protocol",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(PROTOCOL_CHILD, "1")
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{stdout}\n{stderr}");
        // (the test harness's own "running 1 test" came before the switch)
        assert!(stdout.ends_with("<frames><more>"), "{stdout:?}");
        assert!(!stdout.contains("printed by"), "{stdout:?}");
        assert!(
            stderr.contains("printed by the port\nand without a newline"),
            "{stderr:?}"
        );
    }

    /// Reads back the frames written to a buffer: (metadata, tensor names).
    fn read_frames(mut bytes: &[u8]) -> Vec<(HashMap<String, String>, Vec<String>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            let body = &bytes[8..8 + n];
            let (_, md) = safetensors::SafeTensors::read_metadata(body).unwrap();
            let st = safetensors::SafeTensors::deserialize(body).unwrap();
            let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
            names.sort();
            out.push((md.metadata().clone().unwrap_or_default(), names));
            bytes = &bytes[8 + n..];
        }
        out
    }

    #[test]
    fn frames_round_trip_with_metadata_and_tensors() {
        let mut buf = Vec::new();
        {
            let mut w = FrameWriter::new(&mut buf);
            w.write_meta(meta([("kind", "header".into())])).unwrap();
            w.write(
                meta([("kind", "step".into()), ("step", "1".into())]),
                vec![
                    ("loss".to_string(), RawTensor::from_f64(&[0.5])),
                    ("fc1.weight".to_string(), RawTensor::from_f32(&[1.0, 2.0])),
                ],
            )
            .unwrap();
        }
        let frames = read_frames(&buf);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].0["kind"], "header");
        assert!(frames[0].1.is_empty());
        assert_eq!(frames[1].0["step"], "1");
        assert_eq!(frames[1].1, vec!["fc1.weight", "loss"]);
    }

    #[test]
    fn a_frame_body_is_what_safetensors_serialize_returns() {
        let tensors = || {
            vec![
                ("loss".to_string(), RawTensor::from_f64(&[0.5])),
                (
                    "fc1.weight".to_string(),
                    RawTensor::from_f32(&[1.0, 2.0, 3.0]),
                ),
                ("b".to_string(), RawTensor::from_f32(&[])),
                (
                    "exp_avg:fc1.weight".to_string(),
                    RawTensor::from_f32(&[4.0]),
                ),
            ]
        };
        let metadata = meta([("kind", "step".into()), ("step", "7".into())]);
        let want = safetensors::serialize(tensors(), Some(metadata.clone())).unwrap();
        let mut buf = Vec::new();
        FrameWriter::new(&mut buf)
            .write(metadata, tensors())
            .unwrap();
        assert_eq!(
            u64::from_le_bytes(buf[..8].try_into().unwrap()) as usize,
            want.len()
        );
        assert_eq!(&buf[8..], &want[..]);
    }

    #[test]
    fn two_tensors_with_one_name_are_refused() {
        let mut buf = Vec::new();
        let twice = vec![
            ("w", RawTensor::from_f32(&[1.0])),
            ("w", RawTensor::from_f32(&[2.0])),
        ];
        let err = FrameWriter::new(&mut buf).write(meta([("kind", "step".into())]), twice);
        assert_eq!(
            err.unwrap_err().to_string(),
            "two tensors named w in one frame"
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn raw_tensor_bytes_are_little_endian() {
        let t = RawTensor::from_f64(&[1.0]);
        assert_eq!(t.data, 1.0f64.to_le_bytes().to_vec());
        assert_eq!(t.data_len(), 8);
    }
}
