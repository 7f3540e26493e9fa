use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use super::{Link, Proxy};

/// An upstream that echoes every byte, on threads of its own.
fn echo_server() -> TcpListener {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let l = listener.try_clone().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    listener
}

fn connect(proxy: &Proxy) -> TcpStream {
    let s = TcpStream::connect(proxy.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

fn echoes(s: &mut TcpStream) -> bool {
    if s.write_all(b"ping").is_err() {
        return false;
    }
    let mut buf = [0u8; 4];
    s.read_exact(&mut buf).is_ok() && &buf == b"ping"
}

/// Whether the other end closed the connection (a read ends or fails, but does not time out).
fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 16];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

#[test]
fn forwards_cuts_and_restores() {
    let upstream = echo_server();
    let proxy = Proxy::start(upstream.local_addr().unwrap()).unwrap();
    assert_eq!(proxy.upstream(), upstream.local_addr().unwrap());
    assert_eq!(proxy.link(), Link::Open);
    let mut before = connect(&proxy);
    assert!(echoes(&mut before));

    proxy.cut();
    assert_eq!(proxy.link(), Link::Cut);
    assert!(
        closed(&mut before),
        "a forwarded connection survived the cut"
    );
    // A connection made while cut is held: nothing comes back.
    let mut held = connect(&proxy);
    held.write_all(b"ping").unwrap();
    held.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 4];
    let e = held.read(&mut buf).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{e:?}"
    );

    proxy.restore();
    assert_eq!(proxy.link(), Link::Open);
    held.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert!(closed(&mut held), "a held connection survived the restore");
    let mut after = connect(&proxy);
    assert!(echoes(&mut after));

    drop(proxy);
    assert!(closed(&mut after), "a connection survived the proxy");
}
