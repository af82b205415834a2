// Preloaded with `node --import` in front of a server that takes only a port
// (server-everything's `app.listen(PORT)` binds every interface): a `listen` given
// a port and no host listens on 127.0.0.1 instead.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  const portOnly =
    (typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port))) &&
    (args.length === 1 || typeof args[1] === "function");
  if (portOnly) {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
