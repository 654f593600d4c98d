// Package durable replaces a file's content atomically and durably. A
// reader, or a process started after a crash or a power cut, finds at the
// path the old content or the new, whole: never a mix, a truncated file,
// or no file where there was one. Once WriteFile (or Write) returns nil,
// the new content and its rename over the old file survive a power cut.
//
// It is the one place in cairn that writes a file this way (the node id,
// the addresses file and the kept status table today). It knows nothing
// of what the files hold, and imports only the standard library, so a
// client may use it as well as the server.
//
// A write goes through five steps, each of which a crash may follow:
//
//  1. create a temporary file beside the target, named after it
//     (".<name>.tmp-<16 hex digits>"), and write the content into it;
//  2. fsync the temporary file, so its content is on disk before any
//     name points at it;
//  3. close it;
//  4. rename it over the target, which POSIX makes atomic: the name
//     points at the old file or the new one, never at neither;
//  5. fsync the directory, so that the rename itself is on disk. Without
//     this step a power cut shortly after a "successful" write may bring
//     back the old file (or, on first write, no file at all).
//
// If a step before the rename fails, the temporary file is removed and
// the target is untouched. If the directory fsync fails, the target
// already holds the new content but it may not survive a power cut; the
// error says so by naming that step.
//
// # What a crash leaves behind
//
// A crash (or a power cut) before the rename can leave the temporary
// file. Each write first removes the temporary files left by earlier
// writes to the same target, so at most one such file per target
// outlives a crash, and only until the next write. They are never read.
// The removal is why writes to one path must not overlap, from this
// process or another: an overlapping write may remove the other's
// temporary file and make it fail. The target is never torn either way;
// the last rename wins.
//
// # Limits
//
//   - The guarantee is the file system's: it relies on rename being
//     atomic and on fsync reaching stable storage. ext4, XFS and btrfs on
//     honest disks give both; a disk whose volatile write cache lies, or a
//     network file system, may not.
//   - Only the directory holding the target is fsynced, not its
//     ancestors: a directory created just before the first write (by
//     os.MkdirAll, say) may itself be lost to a power cut.
//   - The target is replaced by a new file: its mode is perm less the
//     umask (as os.WriteFile gives a new file), its owner is the writer;
//     the old file's mode, owner, extended attributes and other hard links
//     are not carried over, and a symbolic link at the path is replaced,
//     not followed.
//   - It is written for Linux and other POSIX systems. Elsewhere (Windows)
//     a directory cannot be fsynced this way, and every write would fail
//     at that step, after its rename.
//   - The directory must be writable and have room for a second copy of
//     the file while the write is in flight.
package durable
