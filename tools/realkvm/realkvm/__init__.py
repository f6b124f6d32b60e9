"""The real-KVM harness: kernels, machines (QEMU/SVM, Bochs/VMX), runs and expectations."""
