"""Stage 4, tracking and answers: track ids, answers for skipped frames, calibration."""
