package svcconfig

// RestrictedUmask is the file mode creation mask RestrictFileModes sets:
// no permission for the group or for others.
const RestrictedUmask = 0o077

// RestrictFileModes makes every file and directory the process creates from
// now on readable and writable by its own user only, by setting the process
// umask to 0o077 (RestrictedUmask): a file opened with mode 0o644 is created
// 0o600 and a directory made with 0o755 is created 0o700. A service calls it
// first thing in main, before it opens or creates anything, so that the data
// it keeps (stream logs, checkpoints, credentials it writes) is not
// world-readable whatever umask it was started with. The umask is
// process-wide and never widened again; on systems without one (Windows,
// Plan 9) it does nothing.
func RestrictFileModes() { restrictFileModes() }
