"""The progress of long commands (tools/progress.py): the lines a log gets, the bar a terminal
gets, and the time left, on a fake clock."""

import asyncio
import io

from maple_async.tools.progress import Progress, duration


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _meter(total=200, tty=False, **kw):
    clock, out = Clock(), io.StringIO()
    return Progress("eval", total, stream=out, tty=tty, clock=clock, width=100, **kw), clock, out


def test_durations_read_as_a_person_says_them():
    assert [duration(s) for s in (0, 42.4, 60, 308, 3599, 3600, 7500)] == [
        "0s", "42s", "1m00s", "5m08s", "59m59s", "1h00m", "2h05m"]


def test_a_log_gets_a_line_every_30_seconds_with_battles_win_rate_and_time_left():
    meter, clock, out = _meter()
    results = {"won": 0, "lost": 0, "tied": 0}
    clock.t += 10  # the server starts
    meter.follow(results, "vs random")
    for _ in range(5):  # every second, as the command's ticker does
        clock.t += 1
        meter.tick()
    assert out.getvalue() == ""  # under 30 s: nothing yet
    results.update(won=35, lost=21, tied=1)
    clock.t += 20
    meter.tick()
    assert out.getvalue() == ("[eval] 57/200 battles (28%) | vs random: win rate 0.623 (35W/21L/1T) "
                              "| 35s, ~1m03s left\n")  # 25 s of play for 57
    clock.t += 29
    meter.tick()
    assert out.getvalue().count("\n") == 1  # the next one 30 s after the last
    clock.t += 1
    meter.tick()
    assert out.getvalue().count("\n") == 2


def test_the_battles_of_finished_matches_add_up_and_the_win_rate_is_the_current_ones():
    meter, clock, out = _meter(total=40, every_s=0)
    first = {"won": 20, "lost": 0, "tied": 0}
    meter.follow(first, "vs random")
    clock.t += 10
    meter.settle()
    second = {"won": 1, "lost": 3, "tied": 0}
    meter.follow(second, "vs heuristics")
    clock.t += 4
    meter.tick()
    assert out.getvalue() == "[eval] 24/40 battles (60%) | vs heuristics: win rate 0.250 (1W/3L/0T) | 14s, ~9s left\n"


def test_a_planned_length_bounds_the_time_left_and_self_play_shows_no_win_rate():
    meter, clock, out = _meter(total=0, every_s=0, seconds=120)
    meter.follow({"won": 7, "lost": 5, "tied": 0}, "maple-async self-play", win_rate=False)
    clock.t += 30
    meter.tick()
    assert out.getvalue() == "[eval] 12 battles | maple-async self-play | 30s, ~1m30s left\n"


def test_no_time_left_before_the_first_battle_ends():
    meter, clock, out = _meter(every_s=0)
    meter.follow({"won": 0, "lost": 0, "tied": 0}, "vs random")
    clock.t += 5
    meter.tick()
    assert out.getvalue() == "[eval] 0/200 battles (0%) | vs random | 5s\n"


def test_a_terminal_gets_one_bar_redrawn_in_place_and_erased_before_the_commands_lines():
    meter, clock, out = _meter(tty=True)
    results = {"won": 0, "lost": 0, "tied": 0}
    meter.follow(results, "vs random")
    clock.t += 0.2
    meter.tick()
    assert out.getvalue() == ""  # redrawn at most every half second
    results.update(won=30, lost=20)
    clock.t += 9.8
    meter.tick()
    bar = "[eval] [#####---------------] 50/200 | vs random 0.600 | ~30s left"
    assert out.getvalue() == "\r" + bar
    results.update(won=100, lost=50)
    clock.t += 20
    meter.tick()
    second = "[eval] [###############-----] 150/200 | vs random 0.667 | ~10s left"
    assert out.getvalue() == "\r" + bar + "\r" + second
    assert "\n" not in out.getvalue()
    meter.settle()  # the match ended: its row is printed next, on a clean line
    assert out.getvalue().endswith("\r" + " " * len(second) + "\r")
    assert meter.done() == 150


def test_a_bar_never_wraps():
    meter, clock, out = _meter(tty=True)
    meter.width = 30
    meter.follow({"won": 1, "lost": 0, "tied": 0}, "vs a checkpoint with a very long name.pt")
    clock.t += 1
    meter.tick()
    assert len(out.getvalue()) == 1 + 29


def test_the_ticker_runs_while_the_body_does_and_erases_the_bar_after():
    async def main():
        out = io.StringIO()
        meter = Progress("play", 10, stream=out, tty=True, redraw_s=0.01, width=80)
        async with meter.shown():
            meter.follow({"won": 2, "lost": 1, "tied": 0}, "vs random")
            await asyncio.sleep(0.1)
        return out.getvalue()
    text = asyncio.run(main())
    assert "[play] [######--------------] 3/10 | vs random 0.667" in text and text.endswith("\r")
