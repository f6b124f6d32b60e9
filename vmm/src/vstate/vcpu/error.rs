//! Why a vCPU stopped running the guest, with what a diagnosis needs: the
//! exit, the registers, the guest's console text.

use std::fmt;

use kvm_bindings::kvm_regs;
use tsc_contract::PanicCode;

/// The general-purpose registers that matter for a diagnosis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegsSnapshot {
    /// rip.
    pub rip: u64,
    /// rsp.
    pub rsp: u64,
    /// rax.
    pub rax: u64,
    /// rbx.
    pub rbx: u64,
    /// rcx.
    pub rcx: u64,
    /// rdx.
    pub rdx: u64,
    /// rflags.
    pub rflags: u64,
}

impl From<kvm_regs> for RegsSnapshot {
    fn from(r: kvm_regs) -> Self {
        RegsSnapshot {
            rip: r.rip,
            rsp: r.rsp,
            rax: r.rax,
            rbx: r.rbx,
            rcx: r.rcx,
            rdx: r.rdx,
            rflags: r.rflags,
        }
    }
}

impl fmt::Display for RegsSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rip={:#x} rsp={:#x} rax={:#x} rbx={:#x} rcx={:#x} rdx={:#x} rflags={:#x}",
            self.rip, self.rsp, self.rax, self.rbx, self.rcx, self.rdx, self.rflags
        )
    }
}

/// The registers at an exit, when they could be read: shown as
/// ` (rip=... )` after the message, or nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Regs(pub Option<RegsSnapshot>);

impl fmt::Display for Regs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(r) => write!(f, " ({r})"),
            None => Ok(()),
        }
    }
}

/// KVM's suberror of an internal error, with what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suberror(pub u32);

impl fmt::Display for Suberror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        if self.0 == 1 {
            f.write_str(
                " (emulation failure: an instruction KVM cannot emulate, e.g. SSE/x87 on PVM)",
            )?;
        }
        Ok(())
    }
}

/// An exception vector, shown by name and number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vector(pub u32);

impl fmt::Display for Vector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 21] = [
            "#DE", "#DB", "NMI", "#BP", "#OF", "#BR", "#UD", "#NM", "#DF", "CSO", "#TS", "#NP",
            "#SS", "#GP", "#PF", "reserved", "#MF", "#AC", "#MC", "#XM", "#VE",
        ];
        let name = NAMES.get(self.0 as usize).copied().unwrap_or("(reserved)");
        write!(f, "{name} (vector {})", self.0)
    }
}

/// What the guest said when it panicked: its code and its console text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestPanic {
    /// The raw [`PanicCode`].
    pub code: u32,
    /// What it wrote to the console before.
    pub text: String,
}

impl fmt::Display for GuestPanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = PanicCode::from_raw(self.code)
            .map(PanicCode::describe)
            .unwrap_or("the guest reported an unknown panic code");
        write!(f, "{what} (code {})", self.code)?;
        if !self.text.is_empty() {
            write!(f, ": {}", self.text)?;
        }
        Ok(())
    }
}

/// Why a vCPU stopped running the guest.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum VcpuError {
    /// triple fault (KVM_EXIT_SHUTDOWN){0}
    TripleFault(Regs),
    /// KVM internal error, suberror {suberror}{regs}
    InternalError {
        /// KVM's suberror (1 = emulation failure, e.g. an SSE instruction on PVM).
        suberror: Suberror,
        /// Registers.
        regs: Regs,
    },
    /// entry into the guest failed, hardware reason {reason:#x}{regs}
    FailEntry {
        /// hardware_entry_failure_reason.
        reason: u64,
        /// Registers.
        regs: Regs,
    },
    /// {0}
    GuestPanic(GuestPanic),
    /// CPU exception {vector} at rip={rip:#x}, error code {error_code:#x}
    GuestException {
        /// The vector.
        vector: Vector,
        /// The faulting RIP.
        rip: u64,
        /// The error code (0 when the exception has none).
        error_code: u64,
    },
    /// unexpected exit: {exit}{regs}
    UnexpectedExit {
        /// The exit, described.
        exit: String,
        /// Registers.
        regs: Regs,
    },
    /// the guest halted before finishing its rounds{0}
    EarlyHalt(Regs),
    /// KVM_RUN failed: {0}
    Run(#[source] kvm_ioctls::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_exit_and_carry_the_registers() {
        let regs = Regs(Some(RegsSnapshot {
            rip: 0x1234,
            ..Default::default()
        }));
        let e = VcpuError::TripleFault(regs).to_string();
        assert!(
            e.starts_with("triple fault (KVM_EXIT_SHUTDOWN) (rip=0x1234"),
            "{e}"
        );
        assert_eq!(
            VcpuError::TripleFault(Regs(None)).to_string(),
            "triple fault (KVM_EXIT_SHUTDOWN)"
        );
        let e = VcpuError::InternalError {
            suberror: Suberror(1),
            regs: Regs(None),
        }
        .to_string();
        assert!(e.contains("suberror 1 (emulation failure"), "{e}");
        let e = VcpuError::GuestException {
            vector: Vector(13),
            rip: 0x10_0040,
            error_code: 0x18,
        }
        .to_string();
        assert_eq!(
            e,
            "CPU exception #GP (vector 13) at rip=0x100040, error code 0x18"
        );
        assert!(Vector(99).to_string().starts_with("(reserved)"));
        let e = VcpuError::GuestPanic(GuestPanic {
            code: PanicCode::RustPanic as u32,
            text: "boom".into(),
        })
        .to_string();
        assert_eq!(e, "the guest panicked (code 1): boom");
        let e = VcpuError::GuestPanic(GuestPanic {
            code: 77,
            text: String::new(),
        })
        .to_string();
        assert_eq!(e, "the guest reported an unknown panic code (code 77)");
    }
}
