"""The synthetic driving world: crossspec's embedded default data (pure numpy, no ROS).

- ``scene``: a seeded drive of segments (road, ego motion, another road user, traffic light,
  day/night) and the ``SceneState`` at any time;
- ``render``: RGB / log-intensity frames of a state from the ego camera;
- ``events``: an event-camera simulator on rendered log intensity;
- ``captions``: the caption grammar in two paraphrase styles, its parser and vocabulary;
- ``visibility``: which caption attributes an event camera can see in a window;
- ``dataset``: ``make_window(seed, index)`` for training and evaluation;
- ``dsec``: the same world written in DSEC's file layout.
"""
