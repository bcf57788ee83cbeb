// Package fencefs is a passthrough FUSE filesystem with a revoke switch: the fencing CSI
// driver's per-node view of a volume (dev/csi/). Guarantees:
//   - after Revoke returns, no operation through this mount completes successfully:
//     every request (also on file descriptors opened before, and from a process that
//     was stopped and resumes) is answered EIO; Revoke waits for requests already
//     executing to finish, so none of them lands after it either;
//   - revocation is one-way: a new grant is a new mount;
//   - Stats counts the data writes served (Write, Writev, CopyFileRange, Fallocate) with
//     the CLOCK_MONOTONIC time of the first and last, taken before the request leaves
//     the switch (so a write counted is one that completed before any Revoke returned),
//     and every request refused after the revoke: the storage's own evidence of what a
//     node wrote and when, and that a revoked node kept trying.
//
// Not guaranteed: SetLkw (a blocking lock wait) is not waited for by Revoke (it could
// block it forever); it fails with EIO if it started after Revoke. mmap'ed writes are
// not modelled (the kernel's writeback of dirty pages after revoke fails with EIO too,
// but no test relies on it). Forget, Release and ReleaseDir always proceed: they only
// free kernel and server state.
package fencefs

import (
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Revocable wraps a RawFileSystem with the revoke switch.
type Revocable struct {
	fuse.RawFileSystem
	mu      sync.RWMutex
	revoked bool
	writes  atomic.Int64
	firstNs atomic.Int64
	lastNs  atomic.Int64
	refused atomic.Int64
}

// Stats is what the view served and refused (JSON for the stats command).
type Stats struct {
	Writes       int64 `json:"writes"`
	FirstWriteNs int64 `json:"firstWriteMonoNs"`
	LastWriteNs  int64 `json:"lastWriteMonoNs"`
	Refused      int64 `json:"refused"`
	Revoked      bool  `json:"revoked"`
}

func (r *Revocable) Stats() Stats {
	return Stats{
		Writes:       r.writes.Load(),
		FirstWriteNs: r.firstNs.Load(),
		LastWriteNs:  r.lastNs.Load(),
		Refused:      r.refused.Load(),
		Revoked:      r.Revoked(),
	}
}

// monotonicNs is CLOCK_MONOTONIC, the clock the testbed's logs use (process.hrtime).
func monotonicNs() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// wrote records a served data write; the caller still holds the switch (enter).
func (r *Revocable) wrote(st fuse.Status) {
	if st != fuse.OK {
		return
	}
	now := monotonicNs()
	r.writes.Add(1)
	r.firstNs.CompareAndSwap(0, now)
	for {
		last := r.lastNs.Load()
		if last >= now || r.lastNs.CompareAndSwap(last, now) {
			return
		}
	}
}

func NewRevocable(inner fuse.RawFileSystem) *Revocable { return &Revocable{RawFileSystem: inner} }

// Revoke cuts the view: it waits for executing requests, then fails every later one.
func (r *Revocable) Revoke() {
	r.mu.Lock()
	r.revoked = true
	r.mu.Unlock()
}

func (r *Revocable) Revoked() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.revoked
}

// enter returns false (and holds nothing) when revoked; else the caller must leave().
func (r *Revocable) enter() bool {
	r.mu.RLock()
	if r.revoked {
		r.mu.RUnlock()
		r.refused.Add(1)
		return false
	}
	return true
}

func (r *Revocable) leave() { r.mu.RUnlock() }

func (r *Revocable) String() string { return "leasehold-fencefs" }

func (r *Revocable) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Lookup(c, h, name, out)
}

func (r *Revocable) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.GetAttr(c, in, out)
}

func (r *Revocable) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.SetAttr(c, in, out)
}

func (r *Revocable) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Mknod(c, in, name, out)
}

func (r *Revocable) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Mkdir(c, in, name, out)
}

func (r *Revocable) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Unlink(c, h, name)
}

func (r *Revocable) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Rmdir(c, h, name)
}

func (r *Revocable) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Rename(c, in, oldName, newName)
}

func (r *Revocable) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Link(c, in, name, out)
}

func (r *Revocable) Symlink(c <-chan struct{}, h *fuse.InHeader, to, name string, out *fuse.EntryOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Symlink(c, h, to, name, out)
}

func (r *Revocable) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	if !r.enter() {
		return nil, fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Readlink(c, h)
}

func (r *Revocable) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Access(c, in)
}

func (r *Revocable) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	if !r.enter() {
		return 0, fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (r *Revocable) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	if !r.enter() {
		return 0, fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.ListXAttr(c, h, dest)
}

func (r *Revocable) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (r *Revocable) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.RemoveXAttr(c, h, attr)
}

func (r *Revocable) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Create(c, in, name, out)
}

func (r *Revocable) Tmpfile(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Tmpfile(c, in, out)
}

func (r *Revocable) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	st := r.RawFileSystem.Open(c, in, out)
	// NB: every read goes to the server (no page cache kept across opens), so a revoked
	// view cannot serve stale pages either; writes go through without a writeback cache.
	out.OpenFlags &^= fuse.FOPEN_KEEP_CACHE
	return st
}

func (r *Revocable) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	if !r.enter() {
		return nil, fuse.EIO
	}
	defer r.leave()
	res, st := r.RawFileSystem.Read(c, in, buf)
	if st != fuse.OK || res == nil {
		return res, st
	}
	// Materialise the bytes while holding the lock: a splice-backed result read after
	// Revoke would otherwise still deliver data.
	b, st2 := res.Bytes(buf)
	res.Done()
	if st2 != fuse.OK {
		return nil, st2
	}
	return fuse.ReadResultData(b), fuse.OK
}

func (r *Revocable) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Lseek(c, in, out)
}

func (r *Revocable) GetLk(c <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.GetLk(c, in, out)
}

func (r *Revocable) SetLk(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.SetLk(c, in)
}

func (r *Revocable) SetLkw(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	if r.Revoked() {
		return fuse.EIO
	}
	return r.RawFileSystem.SetLkw(c, in)
}

func (r *Revocable) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if !r.enter() {
		return 0, fuse.EIO
	}
	defer r.leave()
	n, st := r.RawFileSystem.Write(c, in, data)
	r.wrote(st)
	return n, st
}

func (r *Revocable) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if !r.enter() {
		return 0, fuse.EIO
	}
	defer r.leave()
	n, st := r.RawFileSystem.Writev(c, in, data)
	r.wrote(st)
	return n, st
}

func (r *Revocable) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	if !r.enter() {
		return 0, fuse.EIO
	}
	defer r.leave()
	n, st := r.RawFileSystem.CopyFileRange(c, in)
	r.wrote(st)
	return n, st
}

func (r *Revocable) Ioctl(c <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Ioctl(c, in, inbuf, out, outbuf)
}

func (r *Revocable) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Flush(c, in)
}

func (r *Revocable) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Fsync(c, in)
}

func (r *Revocable) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	st := r.RawFileSystem.Fallocate(c, in)
	r.wrote(st)
	return st
}

func (r *Revocable) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.OpenDir(c, in, out)
}

func (r *Revocable) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.ReadDir(c, in, out)
}

func (r *Revocable) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.ReadDirPlus(c, in, out)
}

func (r *Revocable) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.FsyncDir(c, in)
}

func (r *Revocable) StatFs(c <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.StatFs(c, in, out)
}

func (r *Revocable) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	if !r.enter() {
		return fuse.EIO
	}
	defer r.leave()
	return r.RawFileSystem.Statx(c, in, out)
}
