//! A VM in command mode: every vCPU waits for the host's next command (read or
//! write an MSR, read the TSC, one rendezvous, the warp test), so checks can
//! interleave guest and host actions step by step. See [`tsc_contract::Op`].

pub mod one_clock;
mod read;
mod seen;

use std::time::Duration;

use tsc_contract::{handoff, ClockRecord, CommandSlot, Op, PvclockTimeInfo, RoundRecord, Variant};
use vm_memory::GuestMemoryMmap;

use crate::error::RunError;
use crate::tsc::clock::{get_clock, ClockSample};
use crate::tsc::frequency::{FrequencySetting, Scaling, TscRequest};
use crate::tsc::{host_rdtsc, TscError, TscState};
use crate::vstate::error::PoolError;
use crate::vstate::sync_area::{self, SyncRound};
use crate::vstate::vcpu::Command;
use crate::vstate::vm::{self, Vm, VmSpec};
use crate::vstate::{memory, Saved, VcpuPool};

pub use read::{monotonic_raw_ns, GuestRead};
pub use seen::{
    both_directions_bound, interval_apart, kvmclocks_apart_words, Agreement, Handoff, WarpSeen,
};

/// A running command-mode VM. Dropping it stops every vCPU.
pub struct Session {
    pool: VcpuPool,
    /// The number of the next command; the guest reports it when done.
    seq: u32,
}

impl Session {
    /// Creates a VM with `vcpus` vCPUs in command mode and waits until all of
    /// them are parked, ready for the first command. Everything must finish
    /// within `timeout`.
    pub fn start(vcpus: u32, timeout: Duration) -> Result<Session, RunError> {
        Session::start_spec(&VmSpec::command_mode(vcpus), timeout)
    }

    /// As [`Session::start`], the guest's TSC at `tsc` (`--tsc-khz`; `None`:
    /// the host's rate).
    pub fn start_at(
        vcpus: u32,
        tsc: Option<TscRequest>,
        timeout: Duration,
    ) -> Result<Session, RunError> {
        Session::start_spec(
            &VmSpec {
                tsc,
                ..VmSpec::command_mode(vcpus)
            },
            timeout,
        )
    }

    /// As [`Session::start`], for a VM `spec` describes (command mode).
    pub fn start_spec(spec: &VmSpec<'_>, timeout: Duration) -> Result<Session, RunError> {
        Ok(Session::start_prepared(spec, timeout, |_| ())?.0)
    }

    /// As [`Session::start_spec`], with `prepare` done on the VM after its
    /// vCPUs are created and before any of them first runs (as a VMM
    /// configures its vCPUs); returns what `prepare` returned.
    pub fn start_prepared<R>(
        spec: &VmSpec<'_>,
        timeout: Duration,
        prepare: impl FnOnce(&Vm) -> R,
    ) -> Result<(Session, R), RunError> {
        let machine = Vm::new(vm::open_kvm()?, spec)?;
        let prepared = prepare(&machine);
        let mut s = Session {
            pool: VcpuPool::start(machine, timeout, u32::MAX)?,
            seq: 0,
        };
        s.resume()?;
        Ok((s, prepared))
    }

    /// A session on a VM restored from a snapshot ([`crate::restore`]):
    /// starts its vCPU threads without running the guest, whose vCPUs
    /// were saved parked with their report of command `next_command - 1`
    /// completed; the next command the host sends is `next_command`.
    pub fn restored(vm: Vm, timeout: Duration, next_command: u32) -> Result<Session, RunError> {
        Ok(Session {
            pool: VcpuPool::start(vm, timeout, u32::MAX)?,
            seq: next_command,
        })
    }

    /// The number of the command the guest will report done next.
    pub fn next_command(&self) -> u32 {
        self.seq
    }

    /// Every (parked) vCPU's state for a snapshot, each one's pending port
    /// I/O completed first (see [`crate::restore::snapshot`]).
    pub fn save_vcpus(&mut self) -> Result<Vec<Saved>, RunError> {
        Ok(self.pool.save_all(self.seq)?)
    }

    /// Guest memory.
    pub fn mem(&self) -> &GuestMemoryMmap {
        self.pool.mem()
    }

    /// The VM fd.
    pub fn vm_fd(&self) -> Option<&kvm_ioctls::VmFd> {
        self.pool.vm_fd()
    }

    /// Number of vCPUs.
    pub fn vcpus(&self) -> u32 {
        self.pool.vcpus()
    }

    /// Whether KVM has the KVM_VCPU_TSC_OFFSET attribute.
    pub fn has_offset_attr(&self) -> bool {
        self.pool.has_offset_attr()
    }

    /// What this VM says about the host, given every vCPU's first readback.
    pub fn facts(&self, initial: &[TscState]) -> crate::host::VmFacts {
        self.pool.facts(initial)
    }

    /// Whether the guest's CPUID exposes IA32_TSC_ADJUST.
    pub fn guest_tsc_adjust(&self) -> bool {
        self.pool.guest_tsc_adjust()
    }

    /// The KVM system fd (for capability checks).
    pub fn kvm(&self) -> Option<&kvm_ioctls::Kvm> {
        self.pool.kvm()
    }

    /// Resumes every vCPU and waits until all have reported the current
    /// command done.
    fn resume(&mut self) -> Result<(), RunError> {
        self.pool.run_command(self.seq)?;
        self.seq = self.seq.wrapping_add(1);
        Ok(())
    }

    /// Executes one command per vCPU (`cmds[i]` on vCPU i, [`Op::Nop`] for the
    /// rest) and returns the slots with the guest's results.
    pub fn exec(&mut self, cmds: &[CommandSlot]) -> Result<Vec<CommandSlot>, RunError> {
        let needs_reset = cmds.iter().any(|c| {
            [Op::Rendezvous, Op::Warp, Op::Handoff]
                .map(|o| o as u32)
                .contains(&c.op)
        });
        let mem = self.pool.mem();
        if needs_reset {
            memory::reset_rendezvous(mem)?;
            memory::reset_warp(mem)?;
            memory::clear_sync_results(mem, self.vcpus())?;
        }
        for i in 0..self.vcpus() {
            let c = cmds.get(i as usize).copied().unwrap_or_default();
            memory::write_command(mem, i, &c)?;
        }
        self.resume()?;
        let mem = self.pool.mem();
        (0..self.vcpus())
            .map(|i| memory::read_command(mem, i).map_err(RunError::from))
            .collect()
    }

    /// Executes `cmd` on vCPU `vcpu` only (the others do nothing).
    pub fn exec_one(&mut self, vcpu: u32, cmd: CommandSlot) -> Result<CommandSlot, RunError> {
        let mut cmds = vec![CommandSlot::default(); self.vcpus() as usize];
        if let Some(c) = cmds.get_mut(vcpu as usize) {
            *c = cmd;
        }
        let out = self.exec(&cmds)?;
        Ok(out.get(vcpu as usize).copied().unwrap_or_default())
    }

    /// The same command on every vCPU, all resumed together.
    fn exec_all(&mut self, cmd: CommandSlot) -> Result<Vec<CommandSlot>, RunError> {
        let cmds = vec![cmd; self.vcpus() as usize];
        self.exec(&cmds)
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
        let out = self.exec_all(CommandSlot {
            op: Op::Rdtsc as u32,
            ..Default::default()
        })?;
        Ok(out.iter().map(|c| c.result_a).collect())
    }

    /// One rendezvous of `variant` on every vCPU, numbered `round`; fills
    /// `records` with every vCPU's validated record.
    pub fn rendezvous(
        &mut self,
        variant: Variant,
        round: u32,
        records: &mut Vec<RoundRecord>,
    ) -> Result<(), RunError> {
        self.exec_all(CommandSlot {
            op: Op::Rendezvous as u32,
            arg: variant as u32,
            value: u64::from(round),
            ..Default::default()
        })?;
        let vcpus = self.vcpus();
        memory::read_records(self.pool.mem(), vcpus, records)
            .map_err(|vcpu| RunError::UnreadableRecord { vcpu, round })?;
        RunError::check_records(records, round, variant)
    }

    /// What Linux's sync's round just run left in every vCPU's result slot.
    pub fn sync_round(&self) -> Result<SyncRound, RunError> {
        sync_area::read(self.pool.mem(), self.vcpus()).map_err(|error| RunError::Sync {
            round: self.seq,
            error,
        })
    }

    /// The lock-ordered warp test on every vCPU: what each saw.
    pub fn warp(&mut self, iterations: u64) -> Result<Vec<WarpSeen>, RunError> {
        let out = self.exec_all(CommandSlot {
            op: Op::Warp as u32,
            value: iterations,
            ..Default::default()
        })?;
        Ok(out
            .iter()
            .map(|c| WarpSeen {
                max_warp: c.result_a,
                warps: c.result_b,
                handoffs: c.result_c,
                shortest_handoff: (c.result_d != u64::MAX).then_some(c.result_d),
            })
            .collect())
    }

    /// The forced hand-off test on every vCPU ([`tsc_contract::handoff`]):
    /// `exchanges` exchanges per ordered pair, over every ordered pair when
    /// `all` (and the layout holds them; else vCPU 0's pairs: see
    /// [`Handoff::all_pairs`]), each pair's result validated.
    pub fn handoff(&mut self, exchanges: u32, all: bool) -> Result<Handoff, RunError> {
        self.handoff_of(exchanges, all, false)
    }

    /// As [`Session::handoff`], the vCPUs exchanging kvmclock readings (ns)
    /// instead of TSC readings (the VM must have registered kvmclock).
    pub fn kvmclock_handoff(&mut self, exchanges: u32, all: bool) -> Result<Handoff, RunError> {
        self.handoff_of(exchanges, all, true)
    }

    fn handoff_of(
        &mut self,
        exchanges: u32,
        all: bool,
        kvmclock: bool,
    ) -> Result<Handoff, RunError> {
        let all = all && handoff::pairs(self.vcpus(), true).is_some();
        // The guest tags the results with the command's number.
        let tag = self.seq;
        let arg =
            if all { handoff::ALL_PAIRS } else { 0 } | if kvmclock { handoff::KVMCLOCK } else { 0 };
        self.exec_all(CommandSlot {
            op: Op::Handoff as u32,
            arg,
            value: u64::from(exchanges),
            ..Default::default()
        })?;
        let mut pairs = Vec::new();
        memory::read_handoff(
            self.pool.mem(),
            self.vcpus(),
            all,
            tag,
            exchanges,
            &mut pairs,
        )
        .map_err(|error| RunError::Handoff { round: tag, error })?;
        Ok(Handoff {
            exchanges,
            all_pairs: all,
            pairs,
        })
    }

    /// Whether the guest registered its kvmclock pages (KVM offers kvmclock).
    pub fn kvmclock(&self) -> bool {
        self.pool.kvmclock()
    }

    /// On every vCPU at once: kvmclock read, MSR `msr` (IA32_TSC or
    /// IA32_TSC_ADJUST) moved by `delta`, kvmclock read again; every vCPU's
    /// [`ClockRecord`], checked to be this command's.
    pub fn clock_write_all(&mut self, msr: u32, delta: u64) -> Result<Vec<ClockRecord>, RunError> {
        let tag = self.seq;
        self.exec_all(CommandSlot {
            op: Op::ClockWrite as u32,
            arg: msr,
            value: delta,
            ..Default::default()
        })?;
        (0..self.vcpus())
            .map(|vcpu| {
                let r = memory::read_clock_record(self.pool.mem(), vcpu)?;
                if r.is_for(tag, msr) {
                    Ok(r)
                } else {
                    Err(RunError::BadClockRecord { vcpu, tag })
                }
            })
            .collect()
    }

    /// Every vCPU's kvmclock page as it is now (the vCPUs are parked).
    pub fn pvclock_pages(&self) -> Result<Vec<PvclockTimeInfo>, RunError> {
        (0..self.vcpus())
            .map(|v| memory::read_pvclock(self.pool.mem(), v).map_err(RunError::from))
            .collect()
    }

    /// KVM_GET_CLOCK now.
    pub fn clock(&self) -> Result<ClockSample, String> {
        match self.pool.vm_fd() {
            Some(fd) => get_clock(fd),
            None => Err("the VM is gone".into()),
        }
    }

    /// Every vCPU's TSC state as KVM reports it.
    pub fn readback(&mut self) -> Result<Vec<TscState>, RunError> {
        Ok(self.pool.readback(self.seq)?)
    }

    /// Every vCPU's TSC state as KVM reports it, into `out`.
    pub fn readback_into(&mut self, out: &mut Vec<TscState>) -> Result<(), RunError> {
        Ok(self.pool.readback_into(self.seq, out)?)
    }

    /// Host KVM_GET_MSRS of one MSR on `vcpu`.
    pub fn host_get_msr(&mut self, vcpu: u32, msr: u32) -> Result<u64, RunError> {
        Ok(self.pool.msr(vcpu, Command::GetMsr(msr), self.seq)?)
    }

    /// Host KVM_SET_DEVICE_ATTR(KVM_VCPU_TSC_OFFSET) on `vcpu`.
    pub fn host_set_offset(&mut self, vcpu: u32, offset: u64) -> Result<(), RunError> {
        self.pool.msr(vcpu, Command::SetOffset(offset), self.seq)?;
        Ok(())
    }

    /// Host KVM_SET_TSC_KHZ on `vcpu`: `Ok(Ok(()))` set, `Ok(Err(why))`
    /// when KVM refused the rate (an outcome, not an error of the run).
    pub fn host_set_tsc_khz(
        &mut self,
        vcpu: u32,
        khz: u32,
    ) -> Result<Result<(), String>, RunError> {
        match self.pool.msr(vcpu, Command::SetTscKhz(khz), self.seq) {
            Ok(_) => Ok(Ok(())),
            Err(PoolError::Readback {
                error: TscError::SetTscKhz(why),
                ..
            }) => Ok(Err(why)),
            Err(e) => Err(e.into()),
        }
    }

    /// How KVM scales this VM's TSCs, and how `--tsc-khz` was applied.
    pub fn scaling(&self) -> (Scaling, Option<FrequencySetting>) {
        self.pool.scaling()
    }

    /// One guest kvmclock read on `vcpu` (the others do nothing), between
    /// two host reads of the TSC and of CLOCK_MONOTONIC_RAW.
    pub fn guest_clock_read(&mut self, vcpu: u32) -> Result<GuestRead, RunError> {
        let mono_before_ns = monotonic_raw_ns();
        let host_before = host_rdtsc();
        let r = self.exec_one(
            vcpu,
            CommandSlot {
                op: Op::ReadClock as u32,
                ..Default::default()
            },
        )?;
        let host_after = host_rdtsc();
        let mono_after_ns = monotonic_raw_ns();
        Ok(GuestRead {
            vcpu,
            tsc: r.result_a,
            kvmclock_ns: r.result_b,
            version: r.result_c as u32,
            flags: (r.result_c >> 32) as u8,
            mul: r.result_d as u32,
            shift: (r.result_d >> 32) as u8 as i8,
            host_before,
            host_after,
            mono_before_ns,
            mono_after_ns,
        })
    }

    /// Host KVM_SET_MSRS of one MSR on `vcpu`.
    pub fn host_set_msr(&mut self, vcpu: u32, msr: u32, value: u64) -> Result<(), RunError> {
        self.pool.msr(vcpu, Command::SetMsr(msr, value), self.seq)?;
        Ok(())
    }
}
