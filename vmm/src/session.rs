//! A VM in command mode: every vCPU waits for the host's next command (read or
//! write an MSR, read the TSC, one rendezvous, the warp test), so checks can
//! interleave guest and host actions step by step. See [`tsc_contract::Op`].

use std::time::Duration;

use tsc_contract::{CommandSlot, Op, RoundRecord, Variant, CONFIG_COMMAND_MODE};
use vm_memory::GuestMemoryMmap;

use crate::runner::{self, RunError, Threads};
use crate::tsc::{self, TscState};
use crate::vstate::vcpu::{self, Command, Event};
use crate::vstate::vm::{self, Vm};

/// A running command-mode VM. Dropping it stops every vCPU.
pub struct Session {
    threads: Option<Threads>,
    // Dropped only after every vCPU thread has ended (leaked if one never
    // does, rather than unmapped under it).
    machine: Option<Vm>,
    mem: Option<GuestMemoryMmap>,
    n: u32,
    seq: u32,
    with_offset: bool,
    guest_tsc_adjust: bool,
}

impl Session {
    /// Creates a VM with `vcpus` vCPUs in command mode and waits until all of
    /// them are parked, ready for the first command. Everything must finish
    /// within `timeout`.
    pub fn start(vcpus: u32, timeout: Duration) -> Result<Session, RunError> {
        let kvm = vm::open_kvm().map_err(RunError::Vm)?;
        let mut machine = Vm::new(
            kvm,
            vcpus,
            0,
            Variant::XenHead,
            CONFIG_COMMAND_MODE,
            crate::guest_image::EMBEDDED,
        )
        .map_err(RunError::Vm)?;
        vcpu::install_kick_handler().map_err(|e| RunError::Signal(e.to_string()))?;
        let with_offset = machine.vcpus.first().is_some_and(tsc::has_offset_attr);
        let mem = machine.mem.clone();
        let threads = match runner::spawn_threads(&mut machine, with_offset, timeout, u32::MAX) {
            Ok(t) => t,
            Err((e, joined)) => {
                if !joined {
                    std::mem::forget(mem);
                    std::mem::forget(machine);
                }
                return Err(e);
            }
        };
        let guest_tsc_adjust = machine.guest_tsc_adjust;
        let mut s = Session {
            threads: Some(threads),
            machine: Some(machine),
            mem: Some(mem),
            n: vcpus,
            seq: 0,
            with_offset,
            guest_tsc_adjust,
        };
        s.run_all()?;
        Ok(s)
    }

    fn threads(&self) -> &Threads {
        // Present from `start` until drop.
        self.threads.as_ref().unwrap_or_else(|| unreachable!())
    }

    /// Number of vCPUs.
    pub fn vcpus(&self) -> u32 {
        self.n
    }

    /// Whether KVM has the KVM_VCPU_TSC_OFFSET attribute.
    pub fn has_offset_attr(&self) -> bool {
        self.with_offset
    }

    /// Whether the guest's CPUID exposes IA32_TSC_ADJUST.
    pub fn guest_tsc_adjust(&self) -> bool {
        self.guest_tsc_adjust
    }

    /// The KVM system fd (for capability checks).
    pub fn kvm(&self) -> Option<&kvm_ioctls::Kvm> {
        self.machine.as_ref().map(|m| &m.kvm)
    }

    fn mem(&self) -> Result<&GuestMemoryMmap, RunError> {
        self.mem.as_ref().ok_or(RunError::Lost(0))
    }

    /// Resumes every vCPU and waits until all have reported the next command
    /// as done.
    fn run_all(&mut self) -> Result<(), RunError> {
        let t = self.threads();
        let seq = self.seq;
        t.send_all(Command::Run);
        runner::collect(t, self.n, seq, self.mem()?, |ev| match ev {
            Event::RoundDone { vcpu, round } if round == seq => Ok(Some((vcpu, ()))),
            Event::RoundDone { vcpu, round } => Err(RunError::WrongRound {
                vcpu,
                expected: seq,
                found: round,
            }),
            Event::Finished { vcpu } => Err(RunError::WrongRound {
                vcpu,
                expected: seq,
                found: u32::MAX,
            }),
            _ => Ok(None),
        })?;
        self.seq = seq.wrapping_add(1);
        Ok(())
    }

    /// Executes one command per vCPU (`cmds[i]` on vCPU i, [`Op::Nop`] for the
    /// rest) and returns the slots with the guest's results.
    pub fn exec(&mut self, cmds: &[CommandSlot]) -> Result<Vec<CommandSlot>, RunError> {
        let needs_reset = cmds
            .iter()
            .any(|c| c.op == Op::Rendezvous as u32 || c.op == Op::Warp as u32);
        let mem = self.mem()?;
        if needs_reset {
            vm::reset_rendezvous(mem).map_err(RunError::Vm)?;
            vm::reset_warp(mem).map_err(RunError::Vm)?;
        }
        for i in 0..self.n {
            let c = cmds.get(i as usize).copied().unwrap_or_default();
            vm::write_command(mem, i, &c).map_err(RunError::Vm)?;
        }
        self.run_all()?;
        let mem = self.mem()?;
        (0..self.n)
            .map(|i| vm::read_command(mem, i).map_err(RunError::Vm))
            .collect()
    }

    /// Executes `cmd` on vCPU `vcpu` only (the others do nothing).
    pub fn exec_one(&mut self, vcpu: u32, cmd: CommandSlot) -> Result<CommandSlot, RunError> {
        let mut cmds = vec![CommandSlot::default(); self.n as usize];
        if let Some(c) = cmds.get_mut(vcpu as usize) {
            *c = cmd;
        }
        let out = self.exec(&cmds)?;
        Ok(out.get(vcpu as usize).copied().unwrap_or_default())
    }

    /// Guest `rdmsr` on `vcpu`: (value, TSC right after).
    pub fn guest_rdmsr(&mut self, vcpu: u32, msr: u32) -> Result<(u64, u64), RunError> {
        let r = self.exec_one(
            vcpu,
            CommandSlot {
                op: Op::Rdmsr as u32,
                arg: msr,
                ..Default::default()
            },
        )?;
        Ok((r.result_a, r.result_b))
    }

    /// Guest `wrmsr` on `vcpu`.
    pub fn guest_wrmsr(&mut self, vcpu: u32, msr: u32, value: u64) -> Result<(), RunError> {
        self.exec_one(
            vcpu,
            CommandSlot {
                op: Op::Wrmsr as u32,
                arg: msr,
                value,
                ..Default::default()
            },
        )
        .map(|_| ())
    }

    /// Guest ordered TSC read on every vCPU, all resumed together.
    pub fn guest_rdtsc_all(&mut self) -> Result<Vec<u64>, RunError> {
        let cmds = vec![
            CommandSlot {
                op: Op::Rdtsc as u32,
                ..Default::default()
            };
            self.n as usize
        ];
        Ok(self.exec(&cmds)?.iter().map(|c| c.result_a).collect())
    }

    /// One rendezvous of `variant` on every vCPU, numbered `round`; returns
    /// every vCPU's validated record.
    pub fn rendezvous(
        &mut self,
        variant: Variant,
        round: u32,
    ) -> Result<Vec<RoundRecord>, RunError> {
        let cmds = vec![
            CommandSlot {
                op: Op::Rendezvous as u32,
                arg: variant as u32,
                value: u64::from(round),
                ..Default::default()
            };
            self.n as usize
        ];
        self.exec(&cmds)?;
        let mem = self.mem()?;
        (0..self.n)
            .map(|vcpu| {
                let rec = runner::read_record(mem, vcpu).ok_or(RunError::BadRecord {
                    vcpu,
                    round,
                    error: tsc_contract::RecordError::BadMagic(0),
                })?;
                rec.validate(vcpu, round, variant as u32)
                    .map_err(|error| RunError::BadRecord { vcpu, round, error })?;
                Ok(rec)
            })
            .collect()
    }

    /// The lock-ordered warp test on every vCPU: per vCPU (largest backwards
    /// step, number of backwards steps).
    pub fn warp(&mut self, iterations: u64) -> Result<Vec<(u64, u64)>, RunError> {
        let cmds = vec![
            CommandSlot {
                op: Op::Warp as u32,
                value: iterations,
                ..Default::default()
            };
            self.n as usize
        ];
        Ok(self
            .exec(&cmds)?
            .iter()
            .map(|c| (c.result_a, c.result_b))
            .collect())
    }

    /// Every vCPU's TSC state as KVM reports it.
    pub fn readback(&self) -> Result<Vec<TscState>, RunError> {
        runner::readback_all(self.threads(), self.n, self.seq, self.mem()?)
    }

    fn msr_op(&self, vcpu: u32, cmd: Command) -> Result<u64, RunError> {
        let t = self.threads();
        t.send(vcpu, cmd);
        let mut got = runner::collect(t, 1, self.seq, self.mem()?, |ev| match ev {
            Event::Msr { vcpu: v, value, .. } if v == vcpu => match value {
                Ok(x) => Ok(Some((0, x))),
                Err(error) => Err(RunError::Readback { vcpu, error }),
            },
            _ => Ok(None),
        })?;
        got.pop().ok_or(RunError::Lost(vcpu))
    }

    /// Host KVM_GET_MSRS of one MSR on `vcpu`.
    pub fn host_get_msr(&self, vcpu: u32, msr: u32) -> Result<u64, RunError> {
        self.msr_op(vcpu, Command::GetMsr(msr))
    }

    /// Host KVM_SET_MSRS of one MSR on `vcpu`.
    pub fn host_set_msr(&self, vcpu: u32, msr: u32, value: u64) -> Result<(), RunError> {
        self.msr_op(vcpu, Command::SetMsr(msr, value)).map(|_| ())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(t) = self.threads.take() {
            if !t.shutdown() {
                // A vCPU thread is still alive: leak what it may still use
                // rather than unmap guest memory under it.
                std::mem::forget(self.mem.take());
                std::mem::forget(self.machine.take());
            }
        }
    }
}
