// A small web app for Brewlet's OpenJDK runtime (jre-17). Its artifact holds only /app (this
// program as /app/hello-java/hello.jar): the JVM, its libraries and the account it runs as
// come from the node's runtime, and every answer says which runtime build served it.
//
//   java -jar /app/hello-java/hello.jar          serve HTTP on $PORT (8080)
//   java -jar /app/hello-java/hello.jar --once   print the answer and exit

import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.security.KeyStore;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509TrustManager;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

public class Hello {
    static String answer() {
        String release;
        try {
            release = Files.readString(Path.of("/etc/brewlet-runtime-release")).strip();
        } catch (Exception e) {
            release = "unknown (" + e + ")";
        }
        return "hello from java " + Runtime.version() + " (" + System.getProperty("java.home") + ")\n"
            + "runtime: " + release + "\n"
            + "user: " + System.getProperty("user.name") + "\n"
            + "PATH: " + System.getenv().getOrDefault("PATH", "(none)") + "\n"
            + "trusted CAs: " + trustedCAs() + "\n";
    }

    // The JVM's default truststore (the runtime's cacerts), as TLS clients load it.
    static String trustedCAs() {
        try {
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init((KeyStore) null);
            for (var tm : tmf.getTrustManagers()) {
                if (tm instanceof X509TrustManager x) {
                    return String.valueOf(x.getAcceptedIssuers().length);
                }
            }
            return "no X509 trust manager";
        } catch (Exception e) {
            return "unreadable (" + e + ")";
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("--once")) {
            System.out.print(answer());
            return;
        }
        int port = Integer.parseInt(System.getenv().getOrDefault("PORT", "8080"));
        HttpServer srv = HttpServer.create(new InetSocketAddress(port), 64);
        srv.createContext("/", ex -> {
            byte[] body = answer().getBytes(StandardCharsets.UTF_8);
            ex.getResponseHeaders().set("Content-Type", "text/plain");
            ex.sendResponseHeaders(200, body.length);
            try (OutputStream o = ex.getResponseBody()) {
                o.write(body);
            }
        });
        srv.start();
        System.out.println("listening on :" + port + ", java " + Runtime.version());
    }
}
