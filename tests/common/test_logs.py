"""common/logs.py's Reminder: a wait is said past its silence, then once a minute, and never before."""

from common.logs import Reminder


def test_a_reminder_says_a_wait_past_its_silence_then_once_a_minute():
    reminder = Reminder(after=30.0)
    said = [second for second in range(0, 200) if reminder.due(waited=second, now=1000.0 + second)]
    assert said == [31, 92, 153]


def test_a_wait_that_ends_and_starts_again_is_said_again_only_past_its_silence():
    reminder = Reminder(after=30.0, every=60.0)
    assert reminder.due(waited=31.0, now=31.0)
    assert not reminder.due(waited=5.0, now=100.0)  # a new wait, 5 s in: not yet
    assert reminder.due(waited=35.0, now=130.0)
