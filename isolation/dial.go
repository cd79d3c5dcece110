package isolation

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// dial says whether address answers a TCP connection: accepted, or refused by a TCP reset (a host
// answered); or not: refused by an ICMP error on the way (a firewall's REJECT, as a NetworkPolicy
// controller sends), no answer within timeout, or no route. A refusal is told apart by the
// socket's error queue (IP_RECVERR), which holds the ICMP error that caused it; a reset leaves
// none.
func dial(ctx context.Context, address string, timeout time.Duration) Reach {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return Reach{How: err.Error()}
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return Reach{How: "not resolved: " + err.Error()}
	}
	portNum, err := net.LookupPort("tcp", port)
	if err != nil {
		return Reach{How: err.Error()}
	}
	return connect(ctx, netip.AddrPortFrom(ips[0].Unmap(), uint16(portNum)), timeout)
}

// connect opens a TCP connection to addr until ctx ends (timeout, for what it says), with the
// socket's ICMP errors queued.
func connect(ctx context.Context, addr netip.AddrPort, timeout time.Duration) Reach {
	silent := Reach{How: "no answer within " + timeout.String()}
	family, level, recverr := unix.AF_INET6, unix.SOL_IPV6, unix.IPV6_RECVERR
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
	if addr.Addr().Is4() {
		family, level, recverr = unix.AF_INET, unix.SOL_IP, unix.IP_RECVERR
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return Reach{How: "no socket: " + err.Error()}
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, level, recverr, 1); err != nil {
		return Reach{How: "no error queue: " + err.Error()}
	}
	if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return refusal(fd, err)
	}
	for {
		wait := 100 * time.Millisecond
		if deadline, _ := ctx.Deadline(); time.Until(deadline) < wait {
			wait = time.Until(deadline)
		}
		if wait <= 0 || ctx.Err() != nil {
			return silent
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, int(wait.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			// A signal (the Go runtime preempts threads with SIGURG) is no answer: the socket
			// may still be connecting, and its SO_ERROR says 0 until it is done.
			continue
		}
		if err != nil {
			return Reach{How: err.Error()}
		}
		if n == 0 || fds[0].Revents == 0 {
			continue
		}
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return Reach{How: err.Error()}
		}
		if soErr == 0 {
			return Reach{Reachable: true, How: "connected"}
		}
		if soErr == int(unix.ETIMEDOUT) {
			return silent
		}
		return refusal(fd, unix.Errno(soErr))
	}
}

// refusal says what a failed connect means, reading the ICMP error behind it, if any.
func refusal(fd int, err error) Reach {
	icmp := icmpError(fd)
	switch {
	case errors.Is(err, unix.ECONNREFUSED) && icmp:
		return Reach{How: "rejected on the way (an ICMP error, as a firewall's REJECT sends)"}
	case errors.Is(err, unix.ECONNREFUSED):
		return Reach{Reachable: true, How: "refused (a host answered)"}
	case errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EHOSTUNREACH):
		return Reach{How: "no route"}
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return Reach{How: "refused by the node"}
	}
	return Reach{How: err.Error()}
}

// icmpError reports whether the socket's error queue holds an error an ICMP message caused.
func icmpError(fd int) bool {
	oob := make([]byte, 512)
	_, oobn, _, _, err := unix.Recvmsg(fd, make([]byte, 64), oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
	if err != nil {
		return false
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if (m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_RECVERR) ||
			(m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_RECVERR) {
			// struct sock_extended_err: ee_errno (4 bytes), then ee_origin.
			if len(m.Data) > 4 {
				origin := m.Data[4]
				return origin == unix.SO_EE_ORIGIN_ICMP || origin == unix.SO_EE_ORIGIN_ICMP6
			}
		}
	}
	return false
}
