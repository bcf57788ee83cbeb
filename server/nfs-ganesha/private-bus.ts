/**
 * The private message bus ganesha's statistics are read over (with metrics on,
 * LEASEHOLD_NFS_METRICS_PORT): a `dbus-daemon` of the entrypoint's own, on a unix socket in
 * the run directory, which ganesha joins as its "system" bus.
 *
 * Why: ganesha 4.3 has no Prometheus exporter (Monitoring_Port came later); it answers
 * its statistics only over DBus (src/support/export_mgr.c, org.ganesha.nfsd.exportstats),
 * and it joins the *system* bus (src/dbus/dbus_server.c: dbus_bus_get(DBUS_BUS_SYSTEM)),
 * which libdbus finds through DBUS_SYSTEM_BUS_ADDRESS. A pod has no system bus, and a
 * node's must not be shared: so one bus per server, nobody else on it, gone with it.
 *
 * The bus's policy (busConfig, pure) lets anyone who can open the socket own any name
 * and call anything: only root in the container can (the run directory is the
 * container's, the socket is not published). NB: started as root, dbus-daemon tries to
 * raise its file limit to 65536 and, without CAP_SYS_RESOURCE (the preset drops it),
 * prints `Failed to set fd limit to 65536: Operation not permitted` and goes on: harmless.
 *
 * NB: left alone, ganesha does not outlive its bus: it joins with dbus_bus_get and never
 * turns off libdbus's exit-on-disconnect (src/dbus/dbus_server.c of V4.3 has no
 * dbus_connection_set_exit_on_disconnect), so when the daemon ends (killed, OOM) ganesha
 * exits 1 at once (measured). So the entrypoint preloads native/bus-stay.so with it
 * (LEASEHOLD_NFS_BUS_SHIM), which turns that off: only ganesha's DBus thread ends and the
 * share serves on without statistics (stats_up 0) until the container restarts. A daemon
 * that hangs (SIGSTOP) costs only the statistics too: each scrape's calls time out.
 *
 * Start and stop (daemon-child.ts): ready once it answers on its socket; stopped after
 * ganesha on every exit path (main.ts), SIGKILLed by an exit hook if still there.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Clock } from '../../lib/clock.ts';
import type { NfsServerConfig } from './config.ts';
import { type DaemonProcess, startDaemon } from './daemon-child.ts';

export interface PrivateBus extends DaemonProcess {
  /** The address for DBUS_SYSTEM_BUS_ADDRESS (ganesha) and dbus-send's --bus. */
  readonly address: string;
}

/** The bus's socket, in the run directory (off the volume, the container's own). */
export function busSocketPath(runDir: string): string {
  return join(runDir, 'dbus.sock');
}

/** dbus-daemon's config (busconfig.dtd): one unix socket, EXTERNAL auth, everything allowed. */
export function busConfig(socketPath: string): string {
  return [
    '<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"',
    ' "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">',
    "<!-- Rendered by leasehold server/nfs-ganesha (private-bus.ts): ganesha's private bus. -->",
    '<busconfig>',
    '  <type>leasehold-nfs</type>',
    `  <listen>unix:path=${socketPath}</listen>`,
    '  <auth>EXTERNAL</auth>',
    '  <policy context="default">',
    '    <allow user="*"/>',
    '    <allow own="*"/>',
    '    <allow send_destination="*"/>',
    '    <allow receive_sender="*"/>',
    '  </policy>',
    '</busconfig>',
    '',
  ].join('\n');
}

/**
 * Writes the config into the run directory (which must exist) and starts dbus-daemon;
 * resolves once it answers, else throws ServerStartError naming LEASEHOLD_NFS_DBUS_DAEMON_BIN.
 */
export async function startPrivateBus(
  config: Pick<NfsServerConfig, 'runDir' | 'dbusDaemonBin' | 'startTimeoutMs'>,
  clock: Clock,
): Promise<PrivateBus> {
  const socket = busSocketPath(config.runDir);
  const configPath = join(config.runDir, 'dbus.conf');
  writeFileSync(configPath, busConfig(socket));
  const daemon = await startDaemon(
    {
      bin: config.dbusDaemonBin,
      args: ['--nofork', '--nopidfile', '--nosyslog', `--config-file=${configPath}`],
      socket,
      startTimeoutMs: config.startTimeoutMs,
      what: `LEASEHOLD_NFS_METRICS_PORT: could not start the private message bus (LEASEHOLD_NFS_DBUS_DAEMON_BIN=${config.dbusDaemonBin})`,
      hint: "ganesha serves without it; /metrics reports leasehold_nfs_stats_up 0 (the image needs Debian's dbus-daemon)",
    },
    clock,
  );
  return { ...daemon, address: `unix:path=${socket}` };
}
