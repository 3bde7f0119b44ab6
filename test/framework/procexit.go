package framework

// Exited reports whether the process has ended and, if so, how: the error of its wait
// (nil after exit status 0; an *exec.ExitError for a failure or a signal).
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}
