// Package seccomp builds the seccomp filter of a confined command: which
// socket families it may create. The jobs worker assembles it here and
// hands it to the confinement helper as bytes; the helper installs it
// just before it execs the command.
package seccomp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"jetway/pkg/tasks/proctree/confspec"
)

// The seccomp filter is the network's first line: it decides which socket
// families a confined command may create at all, which Landlock cannot
// (it knows TCP ports only, and nothing of UDP, raw or netlink sockets).
// It also refuses io_uring_setup, since io_uring's IORING_OP_SOCKET
// creates sockets without the socket(2) system call the filter sees.
// Refusals answer EACCES (Permission denied), as Landlock's do.
//
// IP sockets, where allowed, are allowed for the ordinary protocols only
// (TCP, UDP, ICMP): Landlock's TCP rules do not cover MPTCP or SCTP
// sockets (on this project's 6.18 kernel, a listener made with
// IPPROTO_MPTCP, which Go's net.Listen uses by default, bound a port
// that Landlock refused to a plain TCP socket), so those are refused.

// socketPolicy is which families socket(2) may create: allow lists them,
// or, with denyOnly, every family but those in deny is allowed.
type socketPolicy struct {
	allow    []uint32 // any protocol
	allowIP  []uint32 // ipProtocols only
	denyOnly bool
	deny     []uint32
}

// ipProtocols are the protocols an allowed IP socket may have: the
// family's default (0), TCP, UDP, ICMP and ICMPv6.
var ipProtocols = []uint32{0, unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6}

// policyFor is c's socket policy, and false when no filter is needed
// (network all with a view).
func policyFor(c *confspec.Confinement) (socketPolicy, bool) {
	var unixSock []uint32
	if c.View {
		// Pathname sockets outside the view do not exist; abstract ones
		// are Landlock's to scope (ABI 6).
		unixSock = []uint32{unix.AF_UNIX}
	}
	switch c.Network {
	case confspec.NetworkAll:
		if c.View {
			return socketPolicy{}, false
		}
		return socketPolicy{denyOnly: true, deny: []uint32{unix.AF_UNIX}}, true
	case confspec.NetworkOutbound:
		return socketPolicy{allow: unixSock, allowIP: []uint32{unix.AF_INET, unix.AF_INET6}}, true
	default:
		return socketPolicy{allow: unixSock}, true
	}
}

// BPF building: instructions with symbolic jump targets, resolved once
// the program is laid out.
type insn struct {
	op     uint16
	k      uint32
	jt, jf string // labels; "" is the next instruction
	label  string // this instruction's label
}

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retDeny  = unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)
	retKill  = unix.SECCOMP_RET_KILL_PROCESS
	ldW      = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeq      = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jge      = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	ret      = unix.BPF_RET | unix.BPF_K
	offNr    = 0
	offArch  = 4
	offArg0  = 16 // args[0], its low 32 bits on a little-endian machine
	offArg2  = 32 // args[2]
)

// program is the filter for p on this machine's architecture (arch.go):
// native calls, and the compat ABI's where the kernel has one.
func program(p socketPolicy) []insn {
	prog := []insn{
		{op: ldW, k: offArch},
		{op: jeq, k: nativeArch, jt: "native", jf: "notnative"},
		{op: jeq, k: compatArch, jt: "compat", jf: "other", label: "notnative"},
		{op: ret, k: retKill, label: "other"}, // an ABI this filter does not know
		{op: ldW, k: offNr, label: "native"},
	}
	if x32Bit != 0 {
		prog = append(prog, insn{op: jge, k: x32Bit, jt: "deny"}) // the x32 ABI shares the native arch
	}
	prog = append(prog,
		insn{op: jeq, k: sysSocket, jt: "family"},
		insn{op: jeq, k: sysIOUringSetup, jt: "deny"},
		insn{op: ret, k: retAllow},
		insn{op: ldW, k: offNr, label: "compat"},
		insn{op: jeq, k: compatSocketcall, jt: "deny"}, // its arguments are behind a pointer
		insn{op: jeq, k: compatSocket, jt: "family"},
		insn{op: jeq, k: sysIOUringSetup, jt: "deny"},
		insn{op: ret, k: retAllow},
		insn{op: ldW, k: offArg0, label: "family"},
	)
	if p.denyOnly {
		for _, f := range p.deny {
			prog = append(prog, insn{op: jeq, k: f, jt: "deny"})
		}
		prog = append(prog, insn{op: ret, k: retAllow})
	} else {
		for _, f := range p.allow {
			prog = append(prog, insn{op: jeq, k: f, jt: "allow"})
		}
		for _, f := range p.allowIP {
			prog = append(prog, insn{op: jeq, k: f, jt: "ipproto"})
		}
		if len(p.allowIP) > 0 {
			prog = append(prog, insn{op: ret, k: retDeny})
			prog = append(prog, insn{op: ldW, k: offArg2, label: "ipproto"})
			for _, proto := range ipProtocols {
				prog = append(prog, insn{op: jeq, k: proto, jt: "allow"})
			}
		}
	}
	return append(prog,
		insn{op: ret, k: retDeny, label: "deny"},
		insn{op: ret, k: retAllow, label: "allow"})
}

// assemble resolves the labels (the first instruction with a label wins)
// into a classic BPF program.
func assemble(prog []insn) ([]unix.SockFilter, error) {
	at := map[string]int{}
	for i, in := range prog {
		if _, ok := at[in.label]; in.label != "" && !ok {
			at[in.label] = i
		}
	}
	out := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		rel := func(l string) (uint8, error) {
			if l == "" {
				return 0, nil
			}
			j, ok := at[l]
			if !ok || j <= i || j-i-1 > 255 {
				return 0, fmt.Errorf("seccomp filter: jump to %q from %d", l, i)
			}
			return uint8(j - i - 1), nil
		}
		jt, err := rel(in.jt)
		if err != nil {
			return nil, err
		}
		jf, err := rel(in.jf)
		if err != nil {
			return nil, err
		}
		out[i] = unix.SockFilter{Code: in.op, Jt: jt, Jf: jf, K: in.k}
	}
	return out, nil
}

// Filter is c's filter as the kernel reads it (struct sock_filter, in
// this machine's byte order), or nil when c needs none (network all with
// a view).
func Filter(c *confspec.Confinement) ([]byte, error) {
	p, ok := policyFor(c)
	if !ok {
		return nil, nil
	}
	if nativeArch == 0 {
		return nil, fmt.Errorf("no seccomp filter is written for this architecture, so the network cannot be restricted")
	}
	filter, err := assemble(program(p))
	if err != nil {
		return nil, err
	}
	size := len(filter) * int(unsafe.Sizeof(filter[0]))
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&filter[0])), size)...), nil
}
