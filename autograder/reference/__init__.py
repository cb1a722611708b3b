"""The reference language model (notebook 3 solved): its training, the calibration of thresholds, `make course`."""
