package main

// The fencing mode (-fencefs): a node reaches a volume only through its own revocable
// view, granted at ControllerPublishVolume and revoked at ControllerUnpublishVolume by
// this controller part, on the host, never by the node — so it works when the node is
// crashed, frozen or partitioned, as a SAN's reservation does.
//
// A grant starts a leasehold-fencefs (dev/fuse) serving a passthrough view of
// <backing>/<volume>, mounted at <state>/views/<volume>/<node>.<n> inside that node's
// mount namespace only (fencefs --mount-ns; the namespace is found from the node's own
// driver part, the process `leasehold-csi-hostdir -mode=node -node-id=<node>` with this
// controller's -backing-dir). The FUSE server stays a child of this process, in the
// host's pid and mount namespaces and cgroups, so freezing the node does not freeze the
// storage, and the server does not hold the node's mount namespace: when the node
// crashes, the namespace goes with its last process, the view's mount with it, and
// fencefs exits (the kernel ends the connection), as a dead machine's storage session.
// The publish context names the view (publishContextView); NodeStage moves that mount
// onto the staging path (mounts.go moveView says why a move) or, for the block kind
// (block.go), mounts the ext4 image in it through a loop device.
//
// Guarantees: at most one live (granted, not revoked) view of a volume at a time unless
// every capability asks for read-only multi-node access: a grant to another node while
// one is live fails FailedPrecondition naming both nodes (the attacher retries). A
// revoke returns only after the view confirmed the cut (requests executing drain,
// every later one on that mount fails EIO, also from a process that was stopped and
// resumes). Grants and revokes are appended, in the order acted, to
// <state>/access.jsonl (seq, op, pv, node, view, monoMs: CLOCK_MONOTONIC ms, wallMs),
// written before the call answers; dev/csi/access-log.ts checks it. Each view's
// fencefs stats (writes served, the CLOCK_MONOTONIC times of the first and last, the
// requests refused after the revoke) are kept by grant, also once its fencefs exited
// (its last line), and served by report (main.go: GET /views on -views-endpoint), so
// access-log.ts writesAcrossRevokes judges what each node wrote against its revoke. Grant and
// revoke are idempotent. A revoked view stays served (EIO) until this process stops,
// as a fenced LUN keeps answering errors; stop (SIGTERM/SIGINT) closes every view
// (fencefs detaches its mount and exits); each fencefs has a parent-death signal, so a
// killed controller leaves no view behind.
// Not guaranteed: a grant to a node whose driver part is not running (crashed, not yet
// booted) fails Unavailable; a node crashed after its grant loses its namespace, and
// with it the mount: fencefs then exits and the revoke finds nothing to cut.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// publishContextView is the publish context's key naming the node's view of the volume.
const publishContextView = "view"

type fenceView struct {
	node, path string
	grantSeq   int // seq of the access record of its grant
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	lines      chan string
	exited     chan struct{}
	revoked    bool
	statsMu    sync.Mutex
	stats      json.RawMessage // fencefs's last "stats" line (fencefs.Stats); nil before one
	statsSeen  chan struct{}   // signalled (never blocking) at each stats line
}

type fencing struct {
	mu         sync.Mutex
	fencefs    string
	backingDir string
	stateDir   string
	seq        int
	n          int
	live       map[string][]*fenceView // volume -> views, revoked ones too
}

func newFencing(fencefs, backingDir, stateDir string) *fencing {
	return &fencing{fencefs: fencefs, backingDir: backingDir, stateDir: stateDir, live: map[string][]*fenceView{}}
}

// errConflict and errNoNode are mapped to gRPC codes by the controller.
type errConflict struct{ volume, node, holder string }

func (e errConflict) Error() string {
	return fmt.Sprintf("volume %s is still granted to node %s: unpublish it there before publishing to node %s", e.volume, e.holder, e.node)
}

type errNoNode struct{ node string }

func (e errNoNode) Error() string {
	return fmt.Sprintf("node %s: no running driver node part (-node-id=%s) of this backing dir, so no mount namespace to serve its view in", e.node, e.node)
}

// grant returns the path of node's live view of volume, starting one if there is none.
func (f *fencing) grant(volume, node string, shared bool) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.live[volume] {
		if v.revoked || !alive(v) {
			continue
		}
		if v.node == node {
			return v.path, nil
		}
		if !shared {
			return "", errConflict{volume: volume, node: node, holder: v.node}
		}
	}
	ns, err := nodeMountNs(node, f.backingDir)
	if err != nil {
		return "", err
	}
	f.n++
	path := filepath.Join(f.stateDir, "views", volume, fmt.Sprintf("%s.%d", node, f.n))
	if err := os.MkdirAll(path, 0o755); err != nil {
		return "", fmt.Errorf("making the view's mount point %s: %w", path, err)
	}
	// NB: fencefs mounts in the node's namespace from outside it (--mount-ns): inside,
	// it would hold the namespace, and with it the mount, past the node's crash.
	cmd := exec.Command(f.fencefs, "--backing", filepath.Join(f.backingDir, volume), "--mountpoint", path, "--mount-ns", ns)
	cmd.Stderr = os.Stderr
	// NB: the parent-death signal of fencefs is set by fencefs (prctl), tied to this process.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting the view of volume %s for node %s: %w", volume, node, err)
	}
	v := &fenceView{node: node, path: path, cmd: cmd, stdin: stdin, lines: make(chan string, 16), exited: make(chan struct{}), statsSeen: make(chan struct{}, 1)}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			// NB: stats lines are kept, not queued: nothing may wait for them (expect),
			// and a full queue would stall this reader.
			if raw, ok := strings.CutPrefix(s.Text(), "stats "); ok {
				v.setStats(raw)
				continue
			}
			v.lines <- s.Text()
		}
		_ = cmd.Wait()
		close(v.exited)
	}()
	if err := v.expect("ready", 15*time.Second); err != nil {
		_ = cmd.Process.Kill()
		return "", fmt.Errorf("mounting the view of volume %s in node %s at %s: %w", volume, node, path, err)
	}
	f.live[volume] = append(f.live[volume], v)
	if err := f.record("grant", volume, node, path); err != nil {
		return "", err
	}
	v.grantSeq = f.seq
	return path, nil
}

// revoke cuts node's live views of volume (every node's when node is empty).
func (f *fencing) revoke(volume, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.live[volume] {
		if v.revoked || (node != "" && v.node != node) {
			continue
		}
		if alive(v) {
			if _, err := io.WriteString(v.stdin, "revoke\n"); err == nil {
				if err := v.expect("revoked", 15*time.Second); err != nil && alive(v) {
					return fmt.Errorf("revoking node %s's view of volume %s (%s): %w", v.node, volume, v.path, err)
				}
			}
		}
		// NB: a view whose fencefs exited counts as revoked: the kernel aborts a FUSE
		// connection whose server is gone (every operation fails, ENOTCONN).
		v.revoked = true
		if err := f.record("revoke", volume, v.node, v.path); err != nil {
			return err
		}
	}
	return nil
}

// viewReport is one view in the answer of report (GET /views): what it served.
type viewReport struct {
	Volume   string `json:"volume"`
	Node     string `json:"node"`
	View     string `json:"view"`
	GrantSeq int    `json:"grantSeq"`
	Revoked  bool   `json:"revoked"`
	// Live: its fencefs still runs (revoked views too); else Stats are its last ones.
	Live bool `json:"live"`
	// fencefs.Stats as fencefs printed them (absent if it printed none); of a live view
	// asked for now, so every write it served before this call is in them.
	Stats json.RawMessage `json:"stats,omitempty"`
}

// report asks every live view for its stats now (5 s each) and lists every view ever
// granted, in grant order, with its latest stats (an exited view's last ones).
func (f *fencing) report() []viewReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []viewReport{}
	for volume, views := range f.live {
		for _, v := range views {
			if alive(v) {
				select {
				case <-v.statsSeen:
				default:
				}
				if _, err := io.WriteString(v.stdin, "stats\n"); err == nil {
					select {
					case <-v.statsSeen:
					case <-v.exited:
					case <-time.After(5 * time.Second):
					}
				}
			}
			v.statsMu.Lock()
			stats := v.stats
			v.statsMu.Unlock()
			out = append(out, viewReport{Volume: volume, Node: v.node, View: v.path, GrantSeq: v.grantSeq, Revoked: v.revoked, Live: alive(v), Stats: stats})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GrantSeq < out[j].GrantSeq })
	return out
}

func (v *fenceView) setStats(raw string) {
	if !json.Valid([]byte(raw)) {
		return
	}
	v.statsMu.Lock()
	v.stats = json.RawMessage(raw)
	v.statsMu.Unlock()
	select {
	case v.statsSeen <- struct{}{}:
	default:
	}
}

// liveNodes lists the nodes with a live view of volume.
func (f *fencing) liveNodes(volume string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, v := range f.live[volume] {
		if !v.revoked && alive(v) {
			out = append(out, v.node)
		}
	}
	return out
}

// closeAll ends every view: stdin EOF makes fencefs detach its mount and exit; SIGKILL
// after 5 s.
func (f *fencing) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, views := range f.live {
		for _, v := range views {
			_ = v.stdin.Close()
		}
	}
	deadline := time.After(5 * time.Second)
	for _, views := range f.live {
		for _, v := range views {
			select {
			case <-v.exited:
			case <-deadline:
				_ = v.cmd.Process.Kill()
				<-v.exited
			}
		}
	}
}

func alive(v *fenceView) bool {
	select {
	case <-v.exited:
		return false
	default:
		return true
	}
}

func (v *fenceView) expect(line string, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case got := <-v.lines:
			if got == line {
				return nil
			}
		case <-v.exited:
			return fmt.Errorf("leasehold-fencefs exited (%v) before %q", v.cmd.ProcessState, line)
		case <-deadline:
			return fmt.Errorf("no %q from leasehold-fencefs within %v", line, timeout)
		}
	}
}

type accessRecord struct {
	Seq    int     `json:"seq"`
	Op     string  `json:"op"`
	PV     string  `json:"pv"`
	Node   string  `json:"node"`
	View   string  `json:"view"`
	MonoMs float64 `json:"monoMs"`
	WallMs int64   `json:"wallMs"`
}

// record appends one access to the log, synced before the call answers.
func (f *fencing) record(op, volume, node, view string) error {
	f.seq++
	b, _ := json.Marshal(accessRecord{Seq: f.seq, Op: op, PV: volume, Node: node, View: view, MonoMs: float64(monotonicNs()) / 1e6, WallMs: time.Now().UnixMilli()})
	file, err := os.OpenFile(filepath.Join(f.stateDir, "access.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("recording the %s of volume %s to node %s: %w", op, volume, node, err)
	}
	defer file.Close()
	if _, err := file.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("recording the %s of volume %s to node %s: %w", op, volume, node, err)
	}
	return file.Sync()
}

// monotonicNs is CLOCK_MONOTONIC, the clock of lib/clock.ts (process.hrtime) and of
// fencefs's stats.
func monotonicNs() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// nodeMountNs finds node's mount namespace through its driver part: the process
// running this binary with -mode=node, -node-id=<node> and this -backing-dir (several
// testbeds may share the host, with the same node names).
func nodeMountNs(node, backingDir string) (string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return "", fmt.Errorf("listing /proc: %w", err)
	}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if has(args, "-mode=node") && has(args, "-node-id="+node) && has(args, "-backing-dir="+backingDir) &&
			strings.HasSuffix(args[0], "leasehold-csi-hostdir") {
			return filepath.Join("/proc", e.Name(), "ns", "mnt"), nil
		}
	}
	return "", errNoNode{node: node}
}

func has(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}
