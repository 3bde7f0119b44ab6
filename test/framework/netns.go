package framework

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// A node with NodeOptions.OwnNetwork runs its containerd, kubelet, shims and host-network
// pods in a network namespace of its own, as a separate machine would. A veth pair links
// it to the machine: the machine's end (named like the node's bridge, so the sweep removes
// it) holds the link's first address (HostAddr), the node's end the second (NodeAddr). In
// the node's namespace: loopback, the default route through the link, the pod bridge with
// the pod subnet's gateway, and IP forwarding (a setting of that namespace only), so pods
// reach the machine. The machine routes the pod subnet through the link, so the API server
// reaches pods (webhooks, the service proxy). Nothing is forwarded by the machine: nodes
// reach each other's pods only through the machine's own addresses, which is all a
// cluster here needs (the API server and the registries listen on machine addresses).
// The namespace lives as long as its holder process (an instance process) and everything
// that runs in it; the veth pair goes with it.
type nodeNet struct {
	holder *Process
	link   string // the veth pair's /24
}

// netnsPath is the node's network namespace ("" without OwnNetwork).
func (n *Node) netnsPath() string {
	if n.net == nil {
		return ""
	}
	return "/proc/" + strconv.Itoa(n.net.holder.rec.PID) + "/ns/net"
}

// HostAddr is the machine's address the node reaches: its end of the node's link with
// OwnNetwork, else the pod bridge's gateway.
func (n *Node) HostAddr() string {
	if n.net == nil {
		return n.Gateway()
	}
	return linkAddr(n.net.link, 1)
}

// NodeAddr is the node's own address (its kubelet's InternalIP): its end of the link with
// OwnNetwork, else the pod bridge's gateway.
func (n *Node) NodeAddr() string {
	if n.net == nil {
		return n.Gateway()
	}
	return linkAddr(n.net.link, 2)
}

func linkAddr(subnet string, host byte) string {
	ip, _, _ := net.ParseCIDR(subnet)
	ip = ip.To4()
	return net.IPv4(ip[0], ip[1], ip[2], host).String()
}

// inNetns prefixes a command so that it runs in the node's network namespace (unchanged
// without OwnNetwork).
func (n *Node) inNetns(args []string) []string {
	if n.net == nil {
		return args
	}
	return append([]string{"/usr/bin/nsenter", "--net=" + n.netnsPath(), "--"}, args...)
}

func (n *Node) createNetwork(TB) error {
	if !n.opts.OwnNetwork {
		return nil
	}
	link := n.Subnet
	for i := 0; link == n.Subnet && i < 10; i++ {
		var err error
		if link, err = freeSubnet(); err != nil {
			return err
		}
	}
	if link == n.Subnet {
		return fmt.Errorf("no second free /24 for the node's link")
	}
	p, err := n.Start("netns", nil, "/usr/bin/unshare", "--net", "--", "/bin/sleep", "infinity")
	if err != nil {
		return err
	}
	n.net = &nodeNet{holder: p, link: link}
	// The holder's pid exists before unshare has moved it into the new namespace; a veth
	// peer sent there too early lands in the machine's namespace (which has an eth0).
	if err := waitOwnNetns(n.netnsPath(), 10*time.Second); err != nil {
		return err
	}
	_, pods, _ := net.ParseCIDR(n.Subnet)
	ones, _ := pods.Mask.Size()
	host := [][]string{
		{"link", "add", n.Bridge, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(p.rec.PID)},
		{"addr", "add", n.HostAddr() + "/24", "dev", n.Bridge},
		{"link", "set", n.Bridge, "up"},
	}
	inside := [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", n.NodeAddr() + "/24", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", n.HostAddr()},
		{"link", "add", n.Bridge, "type", "bridge"},
		{"addr", "add", fmt.Sprintf("%s/%d", n.Gateway(), ones), "dev", n.Bridge},
		{"link", "set", n.Bridge, "up"},
	}
	for _, args := range host {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	for _, args := range inside {
		if err := run("/usr/bin/nsenter", append([]string{"--net=" + n.netnsPath(), "--", "ip"}, args...)...); err != nil {
			return err
		}
	}
	// /proc/sys/net shows the namespace of the process that opens it.
	if err := run("/usr/bin/nsenter", "--net="+n.netnsPath(), "--", "/bin/sh", "-ec", "echo 1 > /proc/sys/net/ipv4/ip_forward"); err != nil {
		return err
	}
	return run("ip", "route", "add", n.Subnet, "via", n.NodeAddr())
}

func run(bin string, args ...string) error {
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", bin, strings.Join(args, " "), err, out)
	}
	return nil
}

// waitOwnNetns waits until path names a network namespace other than this process's.
func waitOwnNetns(path string, timeout time.Duration) error {
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		if ns, err := os.Readlink(path); err == nil && ns != own {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not leave the machine's network namespace within %s", path, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
