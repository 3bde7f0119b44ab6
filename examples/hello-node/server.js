// A small web app for Brewlet's Node.js runtime (node-18). Its artifact holds only /app:
// node, its libraries and the account it runs as come from the node's runtime, and every
// answer says which runtime build served it.
//
//   node /app/hello-node/server.js          serve HTTP on $PORT (8080)
//   node /app/hello-node/server.js --once   print the answer and exit
'use strict';
const fs = require('fs');
const http = require('http');
const os = require('os');

function answer() {
  let release;
  try {
    release = fs.readFileSync('/etc/brewlet-runtime-release', 'utf8').trim();
  } catch (e) {
    release = `unknown (${e.code})`;
  }
  return `hello from node ${process.version} (openssl ${process.versions.openssl})\n` +
    `runtime: ${release}\n` +
    `uid: ${process.getuid()} gid: ${process.getgid()} home: ${os.homedir()}\n` +
    `PATH: ${process.env.PATH === undefined ? '(none)' : process.env.PATH}\n`;
}

if (process.argv[2] === '--once') {
  process.stdout.write(answer());
} else {
  const port = Number(process.env.PORT || 8080);
  process.on('SIGTERM', () => process.exit(0)); // PID 1 ignores SIGTERM otherwise
  http.createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    res.end(answer());
  }).listen(port, () => console.log(`listening on :${port}, node ${process.version}`));
}
