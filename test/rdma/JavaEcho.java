// JavaEcho: the JDK's own socket code over librsock (applications.bats).
//   server ADDR PORT N   a NIO echo server (non-blocking channels, one
//                        Selector: epoll; OP_WRITE after a short write) for N
//                        streams, then one blocking accept whose stream it
//                        closes 3 s later
//   client ADDR PORT N MB FILE   N threads, each a blocking Socket with a
//                        writer thread (MB MiB, shutdownOutput) and a reader
//                        (the echo, CRC-checked); then a NIO stream that
//                        sends FILE with transferTo (sendfile) and again with
//                        a gathering write (writev, a direct buffer among
//                        heap ones) and reads the echo with scattering reads
//                        (readv); then SO_TIMEOUT before the peer's close, the
//                        read at its close, a connect once it is gone; then a
//                        read blocked in one thread, the socket closed by
//                        another (the JDK's pre-close: dup2 and a signal),
//                        on a stream to a listener of its own
// Each prints lines that are the same over kernel TCP and over librsock.
import java.io.*;
import java.net.*;
import java.nio.ByteBuffer;
import java.nio.channels.*;
import java.util.*;
import java.util.zip.CRC32;

public class JavaEcho {
    static void say(String s) { System.out.println(s); System.out.flush(); }

    // NIO echo server: non-blocking, one selector, OP_WRITE when a write is short
    static void server(String addr, int port, int conns) throws Exception {
        Selector sel = Selector.open();
        ServerSocketChannel ss = ServerSocketChannel.open();
        ss.bind(new InetSocketAddress(addr, port));
        ss.configureBlocking(false);
        ss.register(sel, SelectionKey.OP_ACCEPT);
        say("listening");
        int done = 0;
        Map<SocketChannel, ByteBuffer> pend = new HashMap<>();
        while (done < conns) {
            sel.select();
            Iterator<SelectionKey> it = sel.selectedKeys().iterator();
            while (it.hasNext()) {
                SelectionKey k = it.next(); it.remove();
                if (!k.isValid()) continue;
                if (k.isAcceptable()) {
                    SocketChannel c = ss.accept();
                    if (c == null) continue;
                    c.configureBlocking(false);
                    c.socket().setTcpNoDelay(true);
                    c.register(sel, SelectionKey.OP_READ);
                    continue;
                }
                SocketChannel c = (SocketChannel) k.channel();
                ByteBuffer b = pend.get(c);
                if (k.isWritable() && b != null) {
                    c.write(b);
                    if (!b.hasRemaining()) { pend.remove(c); k.interestOps(SelectionKey.OP_READ); }
                    continue;
                }
                if (k.isReadable()) {
                    ByteBuffer r = ByteBuffer.allocate(65536);
                    int n = c.read(r);
                    if (n < 0) { c.close(); done++; continue; }
                    r.flip();
                    c.write(r);
                    if (r.hasRemaining()) { pend.put(c, r); k.interestOps(SelectionKey.OP_WRITE); }
                }
            }
        }
        // one more stream, blocking, closed 3 s on, after the listener
        ss.keyFor(sel).cancel();
        sel.selectNow();
        ss.configureBlocking(true);
        Socket s = ss.socket().accept();
        say("server done " + done);
        Thread.sleep(3000);
        ss.close();
        sel.close();
        s.close();
    }

    static void client(String addr, int port, int conns, int mb, String file) throws Exception {
        Thread[] ts = new Thread[conns];
        String[] res = new String[conns];
        for (int i = 0; i < conns; i++) {
            final int id = i;
            ts[i] = new Thread(() -> {
                try {
                    Socket s = new Socket();
                    s.connect(new InetSocketAddress(addr, port), 30000);
                    OutputStream o = s.getOutputStream();
                    InputStream in = s.getInputStream();
                    long total = (long) mb << 20;
                    CRC32 tx = new CRC32(), rx = new CRC32();
                    Thread w = new Thread(() -> {
                        try {
                            Random r = new Random(id);
                            byte[] buf = new byte[8192 + id * 1000];
                            long left = total;
                            while (left > 0) {
                                r.nextBytes(buf);
                                int n = (int) Math.min(buf.length, left);
                                o.write(buf, 0, n);
                                synchronized (tx) { tx.update(buf, 0, n); }
                                left -= n;
                            }
                            s.shutdownOutput();
                        } catch (IOException e) { say("writer " + id + ": " + e); }
                    });
                    w.start();
                    byte[] buf = new byte[65536];
                    long got = 0;
                    int n;
                    while ((n = in.read(buf)) > 0) { rx.update(buf, 0, n); got += n; }
                    w.join();
                    s.close();
                    res[id] = "conn " + id + " got " + got + (tx.getValue() == rx.getValue() ? " intact" : " CORRUPT");
                } catch (Exception e) { res[id] = "conn " + id + ": " + e; }
            });
            ts[i].start();
        }
        for (Thread t : ts) t.join();
        for (String r : res) say(r);
        if (file != null) nioClient(addr, port, file);
        // SO_TIMEOUT passes before the peer closes; a blocking read then
        // sees its close (-1), by which time its listener is gone
        Socket s = new Socket(addr, port);
        s.setSoTimeout(300);
        try { say("read before the peer's close: " + s.getInputStream().read()); }
        catch (SocketTimeoutException e) { say("read before the peer's close: timed out"); }
        s.setSoTimeout(0);
        say("read at the peer's close: " + s.getInputStream().read());
        Socket s2 = new Socket();
        try { s2.connect(new InetSocketAddress(addr, port), 2000); say("connect after server close: connected"); }
        catch (IOException e) { say("connect after server close: " + e.getClass().getSimpleName()); }
        s.close();
        asyncClose(addr);
    }

    // NIO client: a file sent with transferTo (sendfile), gathering writes
    // (writev) of the same bytes again, scattering reads (readv) of the echo
    static void nioClient(String addr, int port, String file) throws Exception {
        SocketChannel c = SocketChannel.open(new InetSocketAddress(addr, port));
        long len, got = 0;
        CRC32 tx = new CRC32(), rx = new CRC32();
        try (FileChannel f = FileChannel.open(java.nio.file.Paths.get(file))) {
            len = f.size();
            byte[] all = java.nio.file.Files.readAllBytes(java.nio.file.Paths.get(file));
            tx.update(all); tx.update(all);
            Thread w = new Thread(() -> {
                try {
                    long pos = 0;
                    while (pos < len) pos += f.transferTo(pos, len - pos, c);
                    ByteBuffer[] v = new ByteBuffer[3];
                    int third = all.length / 3;
                    v[0] = ByteBuffer.wrap(all, 0, third);
                    v[1] = ByteBuffer.allocateDirect(third).put(all, third, third).flip();
                    v[2] = ByteBuffer.wrap(all, 2 * third, all.length - 2 * third);
                    while (v[2].hasRemaining()) c.write(v);
                    c.shutdownOutput();
                } catch (IOException e) { say("nio writer: " + e); }
            });
            w.start();
            ByteBuffer[] r = {ByteBuffer.allocate(1000), ByteBuffer.allocateDirect(30000), ByteBuffer.allocate(70000)};
            long n;
            while ((n = c.read(r)) >= 0) {
                got += n;
                for (ByteBuffer b : r) {
                    b.flip();
                    if (b.hasArray()) rx.update(b.array(), b.arrayOffset() + b.position(), b.remaining());
                    else { byte[] t = new byte[b.remaining()]; b.get(t); rx.update(t); }
                    b.clear();
                }
            }
            w.join();
        }
        c.close();
        say("nio conn" + (got == 2 * len && tx.getValue() == rx.getValue() ? " intact" : " CORRUPT got " + got));
    }

    // a thread blocked in read() and another thread's close() of that socket
    static void asyncClose(String addr) throws Exception {
        ServerSocket ss = new ServerSocket();
        ss.bind(new InetSocketAddress(addr, 0));
        int port = ss.getLocalPort();
        Thread srv = new Thread(() -> { try { Socket a = ss.accept(); Thread.sleep(3000); a.close(); } catch (Exception e) {} });
        srv.start();
        Socket s = new Socket(addr, port);
        Thread r = new Thread(() -> {
            try { int n = s.getInputStream().read(); say("blocked read returned " + n); }
            catch (IOException e) { say("blocked read: " + e.getClass().getSimpleName() + " " + e.getMessage()); }
        });
        r.start();
        Thread.sleep(500);
        s.close();
        r.join(5000);
        say("reader " + (r.isAlive() ? "STILL BLOCKED" : "woken"));
        srv.join();
        ss.close();
    }

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
        case "server": server(a[1], Integer.parseInt(a[2]), Integer.parseInt(a[3])); break;
        case "client": client(a[1], Integer.parseInt(a[2]), Integer.parseInt(a[3]), Integer.parseInt(a[4]), a.length > 5 ? a[5] : null); break;
        }
    }
}
