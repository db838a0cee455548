import signal
import sys

# A library's threads inherit the signal mask of the thread that starts them (OpenBLAS starts
# its own when numpy is imported). Blocked here, a SIGTERM that arrives while the daemon is
# stopped (the watchdog's, after a stall) can only be taken by the main thread, which reads
# stdin: taken by a BLAS thread, it left the main thread blocked in read() with the handler
# never run, and the daemon never stopped.
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
from injector.daemon import main  # noqa: E402

signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
sys.exit(main())
