//! One host thread per vCPU: the KVM_RUN loop, exit handling, readback, and
//! race-free stopping.
//!
//! A vCPU thread does what the coordinator tells it ([`Command`], through its
//! [`handoff::Mailbox`]) and answers with [`Event`]s (counted by the
//! [`handoff::Hub`]). It runs the guest until the guest reports the end of a
//! round (then it is parked outside KVM_RUN until told otherwise), reads its
//! own TSC state back on request, and turns every exit it does not expect
//! into an error naming the vCPU, the exit and the registers.
//!
//! Stopping: [`Kicker::kick`] sets a flag, sets `immediate_exit` in the vCPU's
//! `kvm_run` and signals the thread. A thread about to enter KVM_RUN then
//! returns at once with EINTR, one inside it is interrupted by the signal, one
//! outside it sees the flag: no window in which a kick is lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;

use kvm_bindings::kvm_run;
use kvm_ioctls::{VcpuExit, VcpuFd};
use tsc_contract::ports;

pub mod error;
pub mod handoff;
pub mod state;

use crate::tsc::frequency::Scaling;
use crate::tsc::{self, TscError, TscState};
use error::{GuestPanic, Regs, RegsSnapshot, Suberror, VcpuError, Vector};
use handoff::{Arrive, Hub, Mailbox};
use state::Saved;

use super::kick::Kicker;
use super::slice;

/// What the coordinator tells a vCPU thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Run the guest until it reports the next round, or the end.
    Run,
    /// As [`Command::Run`], and when the guest reports the end of a round,
    /// read this vCPU's TSC state back at once ([`Event::RoundDone`]'s
    /// `state`): the vCPU is parked outside KVM_RUN then, its round done, so
    /// nothing can change that state before the next `Run`. Saves the
    /// coordinator a second hand-off per vCPU and round.
    RunReadback,
    /// As [`Command::RunReadback`], in a chain of rounds
    /// ([`crate::vstate::chain`]): the state goes to the chain, and only the
    /// vCPU whose report completes the round sends an event
    /// ([`Event::Chained`]).
    Chain,
    /// Read this vCPU's TSC state back (the vCPU is parked).
    Readback,
    /// Read one MSR through KVM_GET_MSRS (the vCPU is parked).
    GetMsr(u32),
    /// Write one MSR through KVM_SET_MSRS, as the host (the vCPU is parked).
    SetMsr(u32, u64),
    /// Set the vCPU's TSC offset through KVM_VCPU_TSC_OFFSET (the vCPU is
    /// parked).
    SetOffset(u64),
    /// Set the vCPU's TSC frequency through KVM_SET_TSC_KHZ, kHz (the vCPU
    /// is parked).
    SetTscKhz(u32),
    /// Complete the pending port I/O and save the vCPU's state for a
    /// snapshot (the vCPU is parked; see [`state`]).
    Save,
    /// Leave the thread.
    Stop,
}

/// What a vCPU thread reports.
#[derive(Debug)]
pub enum Event {
    /// The guest finished round `round` and is parked.
    RoundDone {
        /// The vCPU.
        vcpu: u32,
        /// The round the guest reported.
        round: u32,
        /// After [`Command::RunReadback`]: the vCPU's TSC state read right
        /// after the exit, or why it could not be read.
        state: Option<Result<TscState, TscError>>,
    },
    /// A chained round is complete (this vCPU's report was its last) and
    /// in the chain's ring ([`handoff::Arrive::completed`]
    /// says which).
    Chained,
    /// Command mode: the guest finished command number `seq` (0: none yet,
    /// it is ready for the first) and is parked.
    CommandDone {
        /// The vCPU.
        vcpu: u32,
        /// The command's sequence number, as the guest reported it.
        seq: u32,
    },
    /// The guest finished every round and halted.
    Finished {
        /// The vCPU.
        vcpu: u32,
    },
    /// The answer to [`Command::Readback`].
    Readback {
        /// The vCPU.
        vcpu: u32,
        /// Its state, or why it could not be read.
        state: Result<TscState, TscError>,
    },
    /// The answer to [`Command::GetMsr`], [`Command::SetMsr`],
    /// [`Command::SetOffset`] and [`Command::SetTscKhz`] (the value read,
    /// or the value written).
    Msr {
        /// The vCPU.
        vcpu: u32,
        /// The value, or why the access failed.
        value: Result<u64, TscError>,
    },
    /// The answer to [`Command::Save`].
    Saved {
        /// The vCPU.
        vcpu: u32,
        /// Its state, or why it could not be saved.
        state: Saved,
    },
    /// The vCPU stopped with an error; the thread has ended.
    Failed {
        /// The vCPU.
        vcpu: u32,
        /// What happened.
        error: VcpuError,
    },
    /// The vCPU was kicked out of the guest; the thread has ended.
    Stopped {
        /// The vCPU.
        vcpu: u32,
    },
}

/// A vCPU thread's state.
pub struct VcpuThread {
    index: u32,
    fd: VcpuFd,
    mailbox: Arc<Mailbox<Command>>,
    /// Whether to spin for the next command before parking.
    spin: bool,
    events: Sender<Event>,
    hub: Arc<Hub>,
    stop: Arc<AtomicBool>,
    offsets: tsc::OffsetReader,
    /// Whether KVM scales this vCPU's TSC from the host's (every readback
    /// says it).
    scaling: Scaling,
    console: Vec<u8>,
    done_reported: bool,
    /// Reused for every readback (None only if it could not be allocated:
    /// then each readback allocates its own).
    msrs: Option<tsc::MsrReader>,
    /// Where chained rounds report ([`Command::Chain`]).
    chain: Option<Arc<dyn Arrive<Command>>>,
}

/// Most console bytes kept per vCPU (the rest is dropped, with a note).
const CONSOLE_LIMIT: usize = 4096;

/// How a [`Command::Run`] ended: the vCPU is parked (and can be resumed), or
/// its thread is done.
enum RunEnd {
    Park(Event),
    End(Event),
}

/// How a vCPU thread talks to the coordinator: its mailbox (and whether to
/// spin for the next command), the events' channel and their hub.
pub struct Link {
    /// This thread's commands.
    pub mailbox: Arc<Mailbox<Command>>,
    /// Whether to spin for the next command before parking (not when the
    /// vCPUs outnumber the host's cores).
    pub spin: bool,
    /// Where the events go.
    pub events: Sender<Event>,
    /// Their count.
    pub hub: Arc<Hub>,
    /// Where chained rounds report (`None`: the VM's rounds are not
    /// chained).
    pub chain: Option<Arc<dyn Arrive<Command>>>,
}

impl VcpuThread {
    /// Prepares vCPU `index`'s thread; returns it and its kicker.
    pub fn new(
        index: u32,
        mut fd: VcpuFd,
        link: Link,
        offsets: tsc::OffsetReader,
        scaling: Scaling,
    ) -> (VcpuThread, Kicker) {
        let stop = Arc::new(AtomicBool::new(false));
        let kicker = Kicker::new(stop.clone(), fd.get_kvm_run() as *mut kvm_run);
        (
            VcpuThread {
                index,
                fd,
                mailbox: link.mailbox,
                spin: link.spin,
                events: link.events,
                hub: link.hub,
                stop,
                offsets,
                scaling,
                console: Vec::new(),
                done_reported: false,
                msrs: tsc::MsrReader::new().ok(),
                chain: link.chain,
            },
            kicker,
        )
    }

    /// The thread's body: obey commands until told to stop or the guest ends.
    /// Returns the vCPU fd, so that its `kvm_run` mapping outlives the thread
    /// (the [`Kicker`] may still write to it until the thread is joined) --
    /// even if the loop panics: the panic is caught, reported as
    /// [`Event::Stopped`] (the runner's "thread ended unexpectedly"), and the
    /// fd is still handed back.
    pub fn run(mut self) -> VcpuFd {
        if self.spin {
            // A thread with a core of its own: when woken it takes the core
            // back from a longer-sliced task at once (on a loaded host, a
            // first result 2x later without this). Not when the vCPUs
            // outnumber the cores: there the short slices only hand the
            // core back and forth between vCPU threads. A kernel that
            // refuses it schedules the thread as before.
            let _ = slice::request(slice::SHORT_SLICE_NS);
        }
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.serve()));
        if caught.is_err() {
            let _ = self.events.send(Event::Stopped { vcpu: self.index });
            self.hub.notify(true);
        }
        self.fd
    }

    fn serve(&mut self) {
        let mut last = 0;
        loop {
            let cmd = self.mailbox.next(&mut last, self.spin);
            let (event, end) = match cmd {
                Command::Stop => break,
                Command::Readback => (
                    Event::Readback {
                        vcpu: self.index,
                        state: self.read_state(),
                    },
                    false,
                ),
                Command::GetMsr(index) => (
                    Event::Msr {
                        vcpu: self.index,
                        value: tsc::get_msr(&self.fd, index),
                    },
                    false,
                ),
                Command::SetMsr(index, value) => (
                    Event::Msr {
                        vcpu: self.index,
                        value: tsc::set_msr(&self.fd, index, value).map(|()| value),
                    },
                    false,
                ),
                Command::SetOffset(offset) => (
                    Event::Msr {
                        vcpu: self.index,
                        value: tsc::set_offset(&self.fd, offset).map(|()| offset),
                    },
                    false,
                ),
                Command::SetTscKhz(khz) => (
                    Event::Msr {
                        vcpu: self.index,
                        value: self
                            .fd
                            .set_tsc_khz(khz)
                            .map(|()| u64::from(khz))
                            .map_err(|e| TscError::SetTscKhz(e.to_string())),
                    },
                    false,
                ),
                Command::Save => (
                    Event::Saved {
                        vcpu: self.index,
                        state: {
                            let (offsets, msrs) = (&self.offsets, self.msrs.as_mut());
                            let scaling = &self.scaling;
                            state::save_vcpu(&mut self.fd, |fd| match msrs {
                                Some(m) => tsc::read_with(fd, offsets, m, scaling),
                                None => tsc::read(fd, offsets, scaling),
                            })
                            .map(Box::new)
                        },
                    },
                    false,
                ),
                Command::Run | Command::RunReadback | Command::Chain => match self.run_guest() {
                    RunEnd::Park(Event::RoundDone { vcpu, round, .. })
                        if cmd == Command::Chain && self.chain.is_some() =>
                    {
                        let state = self.read_state();
                        let last = self
                            .chain
                            .as_ref()
                            .is_some_and(|c| c.arrive(vcpu, round, state));
                        if !last {
                            continue;
                        }
                        (Event::Chained, false)
                    }
                    RunEnd::Park(Event::RoundDone { vcpu, round, .. }) if cmd != Command::Run => {
                        let state = Some(self.read_state());
                        (Event::RoundDone { vcpu, round, state }, false)
                    }
                    RunEnd::Park(e) => (e, false),
                    RunEnd::End(e) => (e, true),
                },
            };
            if self.events.send(event).is_err() {
                break;
            }
            self.hub.notify(end);
            if end {
                break;
            }
        }
    }

    /// This (parked) vCPU's TSC state, through the reusable MSR buffer.
    fn read_state(&mut self) -> Result<TscState, TscError> {
        match &mut self.msrs {
            Some(m) => tsc::read_with(&self.fd, &self.offsets, m, &self.scaling),
            None => tsc::read(&self.fd, &self.offsets, &self.scaling),
        }
    }

    fn regs(&self) -> Regs {
        Regs(self.fd.get_regs().ok().map(RegsSnapshot::from))
    }

    fn fail(&self, error: VcpuError) -> RunEnd {
        RunEnd::End(Event::Failed {
            vcpu: self.index,
            error,
        })
    }

    fn console_text(&self) -> String {
        String::from_utf8_lossy(&self.console)
            .chars()
            .map(|c| if c.is_control() && c != '\n' { '?' } else { c })
            .collect::<String>()
            .trim()
            .to_string()
    }

    fn console_byte(&mut self, b: u8) {
        if b == b'\n' {
            if let Some(start) = self.console.iter().rposition(|&c| c == b'\n') {
                let line = String::from_utf8_lossy(&self.console[start + 1..]).into_owned();
                log::info!("guest vCPU {}: {}", self.index, line);
            } else {
                log::info!("guest vCPU {}: {}", self.index, self.console_text());
            }
        }
        if self.console.len() < CONSOLE_LIMIT {
            self.console.push(b);
        }
    }

    fn run_guest(&mut self) -> RunEnd {
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return RunEnd::End(Event::Stopped { vcpu: self.index });
            }
            let exit = match self.fd.run() {
                Ok(exit) => exit,
                Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                    self.fd.set_kvm_immediate_exit(0);
                    // A kick from the spin breaker (which runs only when
                    // the vCPUs outnumber the host's cores, `spin` false
                    // then): let a waiting vCPU run. Otherwise it was a
                    // stop's kick (the flag above ends the loop): a yield
                    // would only hand the core to whatever else is runnable.
                    if !self.spin {
                        std::thread::yield_now();
                    }
                    continue;
                }
                Err(e) => return self.fail(VcpuError::Run(e)),
            };
            // Copy out what the exit says, so the borrow of the vCPU ends here.
            let io_out = match exit {
                VcpuExit::IoOut(port, data) => {
                    let mut v = [0u8; 4];
                    let n = data.len().min(4);
                    v[..n].copy_from_slice(&data[..n]);
                    Ok((port, data.len(), u32::from_le_bytes(v)))
                }
                VcpuExit::Hlt => Err(ExitKind::Hlt),
                VcpuExit::Shutdown => Err(ExitKind::Shutdown),
                VcpuExit::InternalError => Err(ExitKind::Internal),
                VcpuExit::FailEntry(reason, _) => Err(ExitKind::FailEntry(reason)),
                VcpuExit::Intr => Err(ExitKind::Intr),
                VcpuExit::IoIn(port, data) => Err(ExitKind::Other(format!(
                    "port read from {port:#x} ({} bytes)",
                    data.len()
                ))),
                VcpuExit::MmioRead(addr, data) => Err(ExitKind::Other(format!(
                    "MMIO read at {addr:#x} ({} bytes): outside guest memory",
                    data.len()
                ))),
                VcpuExit::MmioWrite(addr, data) => Err(ExitKind::Other(format!(
                    "MMIO write at {addr:#x} ({} bytes): outside guest memory",
                    data.len()
                ))),
                other => Err(ExitKind::Other(format!("{other:?}"))),
            };
            match io_out {
                Ok((port, len, value)) => {
                    if let Some(outcome) = self.handle_out(port, len, value) {
                        return outcome;
                    }
                }
                Err(ExitKind::Hlt) => {
                    if self.done_reported {
                        return RunEnd::End(Event::Finished { vcpu: self.index });
                    }
                    let regs = self.regs();
                    return self.fail(VcpuError::EarlyHalt(regs));
                }
                Err(ExitKind::Shutdown) => {
                    let regs = self.regs();
                    return self.fail(VcpuError::TripleFault(regs));
                }
                Err(ExitKind::Internal) => {
                    // SAFETY: the exit reason is KVM_EXIT_INTERNAL_ERROR, so
                    // `internal` is the union member KVM filled in.
                    let suberror =
                        unsafe { self.fd.get_kvm_run().__bindgen_anon_1.internal.suberror };
                    let regs = self.regs();
                    return self.fail(VcpuError::InternalError {
                        suberror: Suberror(suberror),
                        regs,
                    });
                }
                Err(ExitKind::FailEntry(reason)) => {
                    let regs = self.regs();
                    return self.fail(VcpuError::FailEntry { reason, regs });
                }
                Err(ExitKind::Intr) => continue,
                Err(ExitKind::Other(exit)) => {
                    let regs = self.regs();
                    return self.fail(VcpuError::UnexpectedExit { exit, regs });
                }
            }
        }
    }

    /// Handles an `out`; `Some` ends this `Run`.
    fn handle_out(&mut self, port: u16, len: usize, value: u32) -> Option<RunEnd> {
        let expected_len = if port == ports::CONSOLE || port == ports::YIELD {
            1
        } else {
            4
        };
        let known = matches!(
            port,
            ports::CONSOLE
                | ports::YIELD
                | ports::ROUND_DONE
                | ports::COMMAND_DONE
                | ports::DONE
                | ports::PANIC
                | ports::EXCEPTION
        );
        if !known || len != expected_len {
            let regs = self.regs();
            return Some(self.fail(VcpuError::UnexpectedExit {
                exit: format!("port write to {port:#x} ({len} bytes, value {value:#x})"),
                regs,
            }));
        }
        match port {
            ports::CONSOLE => {
                self.console_byte(value as u8);
                None
            }
            ports::YIELD => {
                // A spin-wait's `pause`, rewritten by the VMM (more vCPUs
                // than host cores): let a vCPU that can move on run (as
                // pause-loop exiting would).
                std::thread::yield_now();
                None
            }
            ports::ROUND_DONE => Some(RunEnd::Park(Event::RoundDone {
                vcpu: self.index,
                round: value,
                state: None,
            })),
            ports::COMMAND_DONE => Some(RunEnd::Park(Event::CommandDone {
                vcpu: self.index,
                seq: value,
            })),
            ports::DONE => {
                self.done_reported = true;
                None
            }
            ports::PANIC => {
                let text = self.console_text();
                Some(self.fail(VcpuError::GuestPanic(GuestPanic { code: value, text })))
            }
            _ => {
                let regs = self.regs().0.unwrap_or_default();
                Some(self.fail(VcpuError::GuestException {
                    vector: Vector(value),
                    rip: regs.rbx,
                    error_code: regs.rcx,
                }))
            }
        }
    }
}

enum ExitKind {
    Hlt,
    Shutdown,
    Internal,
    FailEntry(u64),
    Intr,
    Other(String),
}

/// Spawns the thread for `thread`.
pub fn spawn(thread: VcpuThread) -> std::io::Result<JoinHandle<VcpuFd>> {
    std::thread::Builder::new()
        .name(format!("vcpu{}", thread.index))
        .stack_size(256 * 1024)
        .spawn(move || thread.run())
}
