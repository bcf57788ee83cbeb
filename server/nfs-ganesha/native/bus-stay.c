/*
 * LD_PRELOAD shim for ganesha.nfsd: its connection to the message bus does not end the
 * process when the bus goes away, so a dead private bus (private-bus.ts: killed, OOM)
 * costs the statistics only, not the NFS service.
 *
 * Why: ganesha joins its "system" bus with dbus_bus_get (src/dbus/dbus_server.c of V4.3),
 * which turns libdbus's exit-on-disconnect on, and never turns it off: when the bus
 * daemon ended, ganesha called exit(1) at once (measured) and every client of the share
 * stalled through a restart and a grace period. With it off, the disconnect ends only
 * ganesha's DBus thread: dbus_connection_read_write_dispatch returns FALSE, the thread
 * logs "read_write_dispatch, got disconnected signal" and returns (read from V4.3's
 * source; the server serving on is what the integration test measures).
 *
 * What it does: dbus_bus_get runs libdbus's own, then
 * dbus_connection_set_exit_on_disconnect(connection, FALSE). Nothing else changes.
 * Ganesha 4.3's libganesha_nfsd.so imports both from libdbus-1 dynamically (`nm -D`), so
 * the preloaded dbus_bus_get is the one it calls. Not guaranteed: that a later ganesha
 * still joins through dbus_bus_get.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

/* libdbus's types, opaque here: the shim needs no libdbus headers. */
typedef struct DBusConnection DBusConnection;
typedef struct DBusError DBusError;
typedef int DBusBusType;
typedef unsigned int dbus_bool_t;

DBusConnection *dbus_bus_get(DBusBusType type, DBusError *error)
{
	static DBusConnection *(*real_get)(DBusBusType, DBusError *);
	static void (*set_exit)(DBusConnection *, dbus_bool_t);

	if (real_get == NULL)
		real_get = (DBusConnection * (*)(DBusBusType, DBusError *))
			dlsym(RTLD_NEXT, "dbus_bus_get");
	if (set_exit == NULL)
		set_exit = (void (*)(DBusConnection *, dbus_bool_t))
			dlsym(RTLD_NEXT, "dbus_connection_set_exit_on_disconnect");
	if (real_get == NULL)
		return NULL;
	DBusConnection *connection = real_get(type, error);
	if (connection != NULL && set_exit != NULL)
		set_exit(connection, 0);
	return connection;
}
